"""Index.ask and Client.ask against a scripted Anthropic-compatible server on loopback (the
model is what the test says): a grounded answer with its citation checked against the
original, streamed pieces that add up to it, and an abstention."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

import situate

from conftest import serving


def texts(v: Any) -> Iterator[str]:
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "text" and isinstance(x, str):
                yield x
            else:
                yield from texts(x)
    elif isinstance(v, list):
        for x in v:
            yield from texts(x)


class Scripted(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "".join(texts(body))
        m = re.search(r'<passage id="(\d+)"[^>]*>(?:(?!</passage>).)*vault rotate', prompt, re.S)
        if "capital of Peru" in prompt or not m:
            reply = "NOT IN THE DOCUMENTS"
        else:
            reply = f'Quote: "Run `vault rotate` every 90 days" [{m.group(1)}]\nAnswer: every 90 days [{m.group(1)}].'
        usage = {"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 20}
        if not body.get("stream"):
            out = json.dumps({"content": [{"type": "text", "text": reply}], "stop_reason": "end_turn", "usage": usage}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        events = [("message_start", {"type": "message_start", "message": {"usage": usage}})]
        for word in re.findall(r"\S+\s*", reply):
            events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}))
        events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}}))
        events.append(("message_stop", {"type": "message_stop"}))
        out = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    try:
        yield f"anthropic:claude-3-haiku-20240307?base_url=http://127.0.0.1:{server.server_address[1]}&retries=1"
    finally:
        server.shutdown()


def test_an_answer_cites_the_original_and_streams_as_it_is_written(index: situate.Index, model: str) -> None:
    # The scripted model is a thread of this process: it can only answer while `ask` has
    # released the GIL, so this passing is the GIL released during an engine call.
    pieces: list = []
    a = index.ask("How often are the signing keys rotated?", model=model, mode="retrieval", on_text=pieces.append)
    assert isinstance(a, situate.Answer)
    assert (a.abstained, a.grounded) == (False, True), a
    cited = a.citations[0]
    assert cited.valid and cited.document_id == "docs/keys.md"
    assert "vault rotate" in index.card(cited.chunk_id or "").original_text
    assert "".join(pieces).strip() and "90 days" in "".join(pieces)
    assert all(p.chunk_id for p in a.passages)


def test_a_question_the_documents_do_not_answer_abstains(index: situate.Index, model: str) -> None:
    a = index.ask("What is the capital of Peru?", model=model, mode="retrieval", filters={"paths": "docs/tea*"})
    assert a.abstained and a.grounded
    assert a.answer == "The documents do not contain the answer."
    assert {p.document_id for p in a.passages} <= {"docs/tea.md"}


def test_a_bad_answer_setting_names_its_field(index: situate.Index) -> None:
    with pytest.raises(situate.InvalidRequest) as e:
        index.ask("x", passages=0)
    assert e.value.field == "passages"


def test_the_client_asks_the_service_the_same(model: str, built_index: Path, tmp_path: Path) -> None:
    # The service answers with the model its settings name (a request cannot name one).
    pieces: list = []
    with serving(built_index, tmp_path, f'[answer]\nmodel = "{model}"\n') as url:
        a = situate.Client(url).ask("How often are the signing keys rotated?", mode="retrieval")
        streamed = situate.Client(url).ask("How often are the signing keys rotated?", mode="retrieval", on_text=pieces.append)
    b = situate.Index(built_index).ask("How often are the signing keys rotated?", model=model, mode="retrieval")
    assert (a.answer, [c.chunk_id for c in a.citations]) == (b.answer, [c.chunk_id for c in b.citations])
    assert streamed.answer == a.answer and len(pieces) > 1 and "90 days" in "".join(pieces)
