"""The texts the embedding peers (`embed_peer.py`, `embed_onnx_peer.py`) embed, read as
`situate-bench embed` reads them: a BEIR file's first N records, passages as title + blank
line + text."""
import json


def read(path, n, passage):
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            v = json.loads(line)
            text, title = v.get("text", ""), v.get("title", "")
            out.append(f"{title}\n\n{text}" if passage and title else text)
            if len(out) == n:
                break
    return out
