"""Haystack: the retriever component, alone and in a pipeline."""

from __future__ import annotations

from pathlib import Path

from haystack import Document, Pipeline

from situate.haystack import SituateRetriever


def test_the_component_returns_documents_in_a_pipeline(built_index: Path) -> None:
    p = Pipeline()
    p.add_component("retriever", SituateRetriever(str(built_index), top_k=2))
    out = p.run({"retriever": {"query": "replace the lamp bulb"}})
    docs = out["retriever"]["documents"]
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    assert docs[0].meta["document_id"] == "docs/lamp.md" and "anticlockwise" in (docs[0].content or "")
    assert docs[0].id == docs[0].meta["chunk_id"] and docs[0].score is not None


def test_the_component_round_trips_through_its_dict(built_index: Path) -> None:
    r = SituateRetriever(str(built_index), top_k=3, mode="bm25")
    again = SituateRetriever.from_dict(r.to_dict())
    assert again.top_k == 3 and again.mode == "bm25"
    assert len(again.run("tea", top_k=1)["documents"]) == 1
