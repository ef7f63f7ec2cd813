"""LlamaIndex: the retriever in a query engine's place, and the extractor in an
IngestionPipeline where DocumentContextExtractor goes."""

from __future__ import annotations

from pathlib import Path

from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeWithScore
from llama_index.core.storage.docstore import SimpleDocumentStore

from situate.llama_index import SituateContextExtractor, SituateRetriever


def test_the_retriever_returns_nodes_with_scores(built_index: Path) -> None:
    nodes = SituateRetriever(str(built_index), similarity_top_k=2).retrieve("when do deploys run")
    assert len(nodes) == 2 and all(isinstance(n, NodeWithScore) for n in nodes)
    best = nodes[0]
    assert best.node.node_id == best.node.metadata["chunk_id"]
    assert best.node.metadata["document_id"] == "docs/deploy.md"
    assert "Tuesday" in best.node.get_content()
    # What an LLM reads: the context and the chunk, not the scores.
    llm_text = best.node.get_content(metadata_mode="llm")
    assert best.node.metadata["context"] in llm_text and "legs" not in llm_text
    assert nodes[0].score is not None and nodes[0].score >= (nodes[1].score or 0)


def test_the_extractor_writes_contexts_in_a_pipeline_and_a_rerun_pays_nothing(tmp_path: Path) -> None:
    text = "# Runbook\n\n## Keys\n\n" + "Rotate the keys every ninety days. " * 30 + "\n\n## Tea\n\n" + "Green tea at 80 degrees. " * 30
    doc = Document(text=text, id_="runbook")
    store = SimpleDocumentStore()
    store.add_documents([doc])
    extractor = SituateContextExtractor(context="structural", path=tmp_path / "contexts", docstore=store)
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=16), extractor])
    nodes = pipeline.run(documents=[doc])
    assert len(nodes) > 2
    contexts = [n.metadata.get("context", "") for n in nodes]
    assert all(c.startswith("From runbook, section Runbook") for c in contexts), contexts
    assert any("Keys" in c for c in contexts) and any("Tea" in c for c in contexts), contexts
    runs = extractor._contextualizer.last_run
    assert runs is not None and runs.report.added == 1
    IngestionPipeline(transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=16), extractor]).run(documents=[doc])
    assert extractor._contextualizer.last_run.report.unchanged == 1
