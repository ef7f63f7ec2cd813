"""situate.Client against `situate serve` on the same index: the same answers as an
Index, the same exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest

import situate


def test_the_client_answers_as_the_index_does(service: str, built_index: Path) -> None:
    client = situate.Client(service)
    index = situate.Index(built_index)
    for q in ["how often are the signing keys rotated?", "green tea temperature"]:
        a = client.search(q, k=3)
        b = index.search(q, k=3)
        assert [(h.chunk_id, h.context, h.original_text) for h in a.hits] == [
            (h.chunk_id, h.context, h.original_text) for h in b.hits
        ]
        assert [[leg.leg for leg in h.legs] for h in a.hits] == [[leg.leg for leg in h.legs] for h in b.hits]
    chunk = index.search("tea", k=1).hits[0].chunk_id
    assert client.card(chunk) == index.card(chunk)
    assert client.document("docs/tea.md") == index.document("docs/tea.md")
    assert client.status().stats["store"] == index.status().stats["store"]
    assert [d.id for d in client.documents(limit=50).documents] == [d.id for d in index.documents(limit=50).documents]


def test_the_client_raises_the_same_exceptions(service: str, built_index: Path) -> None:
    client = situate.Client(service)
    with pytest.raises(situate.InvalidRequest) as e:
        client.search("x", k=0)
    assert e.value.field == "k" and e.value.status == 400
    with pytest.raises(situate.NotFound):
        client.card("no-such-chunk")
    with pytest.raises(situate.Unavailable):
        situate.Client("http://127.0.0.1:9", timeout=2).status()


def test_the_client_ingests_texts_as_a_job_and_reviews_a_context(service: str) -> None:
    client = situate.Client(service)
    out = client.ingest(texts=[{"id": "kb/9", "text": "The VPN gateway restarts at 03:00 UTC.", "metadata": {"team": "ops"}}])
    assert isinstance(out, situate.IngestResult) and out.report.added == 1
    hits = client.search("when does the VPN gateway restart", filters={"meta": {"team": "ops"}}).hits
    assert [h.document_id for h in hits] == ["kb/9"]
    decided = client.contexts.set(hits[0].chunk_id, "reject")
    assert decided.context_status == "rejected"
    client.remove("kb/9")
    with pytest.raises(situate.NotFound):
        client.document("kb/9")


def test_async_search_over_http(service: str) -> None:
    import asyncio

    client = situate.Client(service)
    found = asyncio.run(client.asearch("deploy", 1))
    assert found.hits[0].document_id == "docs/deploy.md"


def test_the_client_backs_up_and_rebuilds_the_service_index(service: str, tmp_path: Path) -> None:
    client = situate.Client(service)
    made = client.backup("nightly")
    assert Path(made["backup"]) == tmp_path / "backups" / "nightly"
    restored = situate.Index.restore(made["backup"], tmp_path / "restored")
    assert restored["check"]["healthy"] is True
    assert situate.Index(tmp_path / "restored").search("deploy", k=1).hits[0].document_id == "docs/deploy.md"
    with pytest.raises(situate.InvalidRequest):
        client.backup("../elsewhere")
    assert client.rebuild()["chunks"] > 0
    assert client.search("deploy", k=1).hits[0].document_id == "docs/deploy.md"


def test_the_client_tunes_as_a_job_and_refuses_to_write(service: str, tmp_path: Path) -> None:
    import json

    from test_index import QUESTIONS

    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in QUESTIONS))
    client = situate.Client(service)
    a = client.tune(questions, folds=2, grid={"fusions": ["rrf", "zscore"], "alphas": [0.5]})
    assert a["questions"] == len(QUESTIONS) and a["decision"] in ("keep", "change")
    with pytest.raises(situate.SituateError) as e:
        client.tune(questions, write=tmp_path / "situate.toml")
    assert e.value.field == "write"
