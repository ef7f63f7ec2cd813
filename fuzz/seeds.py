"""Writes the fuzz targets' seed corpora into fuzz/seeds/TARGET/ (committed; rerun to
remake them):

    python fuzz/seeds.py DOCS_DIR [VECTORS.flat]

DOCS_DIR holds the real documents `crates/cli/tests/python/make_documents.py` writes (its
`docs/` folder): report.pdf is cut down to a small PDF written here with a core font, the
Office files and the workbook are taken as they are, and their XML parts seed
`office_xml`. Everything else is written here by hand, small. Targets that read a selector
byte first (`situate_fuzz::select`) get it prepended.
"""

import json
import os
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEEDS = os.path.join(HERE, "seeds")


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def small_pdf():
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_compression(False)
    for n in (1, 2):
        pdf.add_page()
        pdf.set_font("Helvetica", size=14)
        pdf.cell(0, 10, f"{n}. Pump maintenance", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=10)
        pdf.multi_cell(0, 5, "The pump at station 7 ran for 40 hours before its bearing was replaced. " * 3)
    return bytes(pdf.output())


def gguf(kvs, tensors=()):
    """A GGUF v3 file: the key/values (strings and u32s), then tensor infos and data."""

    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, v in kvs:
        if isinstance(v, str):
            out += s(k) + struct.pack("<I", 8) + s(v)
        else:
            out += s(k) + struct.pack("<I", 4) + struct.pack("<I", v)
    offset = 0
    for name, dims in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 0, offset)  # F32
        n = 1
        for d in dims:
            n *= d
        offset += 4 * n
    out += b"\0" * ((32 - len(out) % 32) % 32)
    for _, dims in tensors:
        n = 1
        for d in dims:
            n *= d
        out += struct.pack(f"<{n}f", *([0.5] * n))
    return out


def safetensors():
    data = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, "__metadata__": {"format": "pt"}}).encode()
    return struct.pack("<Q", len(header)) + header + data


def main():
    docs = sys.argv[1]
    put("pdf", "small.pdf", small_pdf())
    with open(os.path.join(docs, "bad", "scan.pdf"), "rb") as f:
        put("pdf", "scan.pdf", f.read())
    for target, name in (("docx", "report.docx"), ("pptx", "slides.pptx"), ("odt", "report.odt")):
        with open(os.path.join(docs, name), "rb") as f:
            put(target, name, f.read())
        with zipfile.ZipFile(os.path.join(docs, name)) as z:
            for part in z.namelist():
                if part in ("word/document.xml", "ppt/slides/slide1.xml", "content.xml"):
                    put("office_xml", part.replace("/", "_"), z.read(part))
    with open(os.path.join(docs, "budget.xlsx"), "rb") as f:
        put("workbook", "budget.xlsx", b"\x00" + f.read())
    with open(os.path.join(docs, "stock.csv"), "rb") as f:
        put("csv", "stock.csv", b"\x00" + f.read())
    put("csv", "tabs.tsv", b"\x01name\tflow\tnote\npump 1\t40\t\"a, b\"\npump 2\t\t\n")
    with open(os.path.join(docs, "page.html"), "rb") as f:
        put("html", "page.html", f.read())
    with open(os.path.join(ROOT, "crates/cli/tests/fixtures/corpus/guide/faq.html"), "rb") as f:
        put("html", "faq.html", f.read())

    md = "# Pumps\n\n## Maintenance\n\nOil the bearing weekly.\n\n| pump | flow |\n|---|---|\n| 1 | 40 |\n| 2 | 41 |\n\n```rust\nfn main() {}\n```\n\n- one\n- two\n"
    put("chunker", "markdown.md", b"\x00" + md.encode())
    put("chunker", "text.txt", b"\x07" + "Plain text. Двa предложения. 两个句子。\n\nA second paragraph.".encode())
    put("chunker", "rust.rs", b"\x02" + b"/// A pump.\npub struct Pump { flow: u32 }\n\nimpl Pump {\n    pub fn new() -> Self { Pump { flow: 0 } }\n}\n")
    put("chunker", "python.py", b"\x03" + b"class Pump:\n    def __init__(self):\n        self.flow = 0\n\n\ndef run(p):\n    return p.flow\n")

    put("gguf", "tiny.gguf", gguf(
        [("general.architecture", "gemma3"), ("gemma3.context_length", 128), ("tokenizer.ggml.model", "gpt2")],
        [("token_embd.weight", [4, 2])],
    ))
    put("gguf", "empty.gguf", gguf([]))
    put("safetensors", "tiny.safetensors", safetensors())
    put("tokenizer_json", "wordlevel.json", json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1, "pump": 2}, "unk_token": "[UNK]"},
    }))
    put("tokenizer_json", "wordpiece.json", json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                  "vocab": {"[UNK]": 0, "the": 1, "pump": 2, "##s": 3}},
    }))

    put("settings", "full.toml", """[search]
mode = "hybrid"
k = 20
context_weight = 0.5
rerank = "none"

[ingest]
context = "structural"
max_tokens = 200
overlap = 20

[llm]
model = "local"

[answer]
k = 8
""")
    put("settings", "store.toml", "[store]\nurl = \"postgres://situate@127.0.0.1:5432/situate\"\n")

    with open(os.path.join(ROOT, "crates/cli/tests/fixtures/beir/corpus.jsonl"), "rb") as f:
        put("corpus", "corpus.jsonl", b"\x00" + f.read()[:1500])
    put("corpus", "codebase_chunks.json", b"\x01" + json.dumps([{
        "doc_id": "doc_1", "original_uuid": "u1", "content": "fn main() {}\nfn pump() {}",
        "chunks": [{"chunk_id": "doc_1_chunk_0", "original_index": 0, "content": "fn main() {}"},
                   {"chunk_id": "doc_1_chunk_1", "original_index": 1, "content": "fn pump() {}"}],
    }]).encode())
    put("corpus", "notes.md", b"\x02# Notes\n\nThe pump.\n")

    with open(os.path.join(ROOT, "crates/cli/tests/fixtures/beir/queries.jsonl"), "rb") as f:
        put("eval_data", "queries.jsonl", b"\x00" + f.read())
    with open(os.path.join(ROOT, "crates/cli/tests/fixtures/beir/qrels/test.tsv"), "rb") as f:
        put("eval_data", "qrels.tsv", b"\x01" + f.read())
    with open(os.path.join(ROOT, "crates/cli/tests/fixtures/anthropic/evaluation_set.jsonl"), "rb") as f:
        put("eval_data", "evaluation_set.jsonl", b"\x02" + f.read()[:2000])

    for i, q in enumerate(["pump bearing", "\"pump station\" -oil", "насос станции", "七号站的泵", "flow:40 AND (a OR b)", "C++ std::vector<int>"]):
        put("query", f"q{i}", bytes([i * 37 % 256]) + q.encode())

    put("request_json", "search.json", b"\x00" + json.dumps({"query": "pump", "k": 5, "mode": "hybrid", "filter": {"documents": ["a*"], "languages": ["en"]}}).encode())
    put("request_json", "ask.json", b"\x01" + json.dumps({"question": "when was the bearing replaced", "k": 8, "search": {"mode": "bm25"}}).encode())
    put("request_json", "job.json", b"\x02" + json.dumps({"kind": "ingest", "texts": [{"id": "a", "text": "# A\n\nText."}], "batch": 8}).encode())
    put("request_json", "documents.json", b"\x03" + json.dumps({"limit": 10, "after": "a"}).encode())
    put("request_json", "context.json", b"\x04" + json.dumps({"document_id": "a", "chunk_id": "a#0", "context": "ctx", "model": None, "prompt_version": None, "status": "verified"}).encode())

    # A vector snapshot as the engine writes it (the second argument: an index's
    # vectors-G.flat, from `situate ingest --embedder hash:8` of a few small files).
    if len(sys.argv) > 2:
        with open(sys.argv[2], "rb") as f:
            put("vector_snapshot", "flat", b"\x00" + f.read())

    put("backup_manifest", "manifest.json", json.dumps({
        "format": 1, "situate_version": "0.1.0", "created_at": "2026-12-06T00:00:00Z", "generation": 3,
        "bm25": "bm25-1", "bm25_generation": 3, "vectors": None,
        "files": [{"path": "cards.db", "bytes": 4, "blake3": "00"}],
    }))


if __name__ == "__main__":
    main()
