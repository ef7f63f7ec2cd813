"""LangChain: the standard retriever suite of langchain-tests, and the contextualizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Type

import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests

from situate.langchain import SituateContextualizer, SituateRetriever


class TestSituateRetrieverStandard(RetrieversIntegrationTests):
    """langchain-tests' RetrieversIntegrationTests against a real index."""

    @pytest.fixture(autouse=True)
    def _index(self, built_index: Path) -> None:
        self._path = built_index

    @property
    def retriever_constructor(self) -> Type[SituateRetriever]:
        return SituateRetriever

    @property
    def retriever_constructor_params(self) -> Dict[str, Any]:
        return {"index": str(self._path), "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "how often are the signing keys rotated?"


def test_documents_carry_the_original_and_the_context_apart(built_index: Path) -> None:
    docs = SituateRetriever(index=str(built_index), k=3).invoke("refund days")
    assert docs[0].metadata["document_id"] == "docs/refunds.md"
    assert docs[0].page_content.startswith("# Refunds")
    assert docs[0].metadata["context"] and docs[0].metadata["context"] not in docs[0].page_content
    assert {leg["leg"] for leg in docs[0].metadata["legs"]} == {"bm25", "vector"}
    assert docs[0].id == docs[0].metadata["chunk_id"]


def test_the_contextualizer_splits_and_puts_each_context_before_its_chunk(tmp_path: Path) -> None:
    text = "# Handbook\n\n## Keys\n\n" + "Rotate the keys every ninety days. " * 60 + "\n\n## Tea\n\n" + "Green tea at 80 degrees. " * 60
    t = SituateContextualizer(context="structural", path=tmp_path / "contexts", max_tokens=128)
    out = t.transform_documents([Document(page_content=text, metadata={"source": "handbook.md", "team": "ops"})])
    assert len(out) > 2
    for d in out:
        assert d.metadata["context"] and d.page_content == d.metadata["context"] + "\n\n" + d.metadata["original"]
        assert d.metadata["original"] in text and d.metadata["team"] == "ops"
    assert any("Tea" in d.metadata["context"] for d in out)
    assert t.contextualizer.last_run is not None and t.contextualizer.last_run.report.added == 1
    again = t.transform_documents([Document(page_content=text, metadata={"source": "handbook.md", "team": "ops"})])
    assert [d.page_content for d in again] == [d.page_content for d in out]
    assert t.contextualizer.last_run.report.unchanged == 1
