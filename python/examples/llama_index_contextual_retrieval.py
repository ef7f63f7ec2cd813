"""Contextual Retrieval in LlamaIndex, with situate.

The recipe: an IngestionPipeline whose DocumentContextExtractor asks an LLM for each
node's context (stored in the node's metadata, so the embedder reads it), then a
retriever in a query engine. With situate:

1. ``SituateContextExtractor`` goes where ``DocumentContextExtractor`` goes (situate's
   local LLM; contexts kept, so a second run pays nothing);
2. ``SituateRetriever`` over a situate index goes in the query engine: hybrid search over
   the contextualized chunks. The answer-writing LLM is left out here (``MockLLM``); the
   retrieved nodes are what it would read.

Run: python llama_index_contextual_retrieval.py DOCS_DIR QUERY [--context llm|structural]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from llama_index.core import Document, Settings
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import ResponseMode, get_response_synthesizer
from llama_index.core.storage.docstore import SimpleDocumentStore

import situate
from situate.llama_index import SituateContextExtractor, SituateRetriever


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs", type=Path)
    ap.add_argument("query")
    ap.add_argument("--context", default="llm", help="llm (the recipe), document+llm, structural")
    ap.add_argument("--work", type=Path, default=Path(tempfile.mkdtemp(prefix="situate-example-")))
    a = ap.parse_args()

    documents = [Document(text=p.read_text(encoding="utf-8"), id_=p.name) for p in sorted(a.docs.rglob("*.md"))]
    docstore = SimpleDocumentStore()
    docstore.add_documents(documents)

    # 1. The ingestion pipeline, with situate's extractor where DocumentContextExtractor goes.
    extractor = SituateContextExtractor(context=a.context, path=a.work / "contexts", docstore=docstore)
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=256, chunk_overlap=32), extractor])
    nodes = pipeline.run(documents=documents)
    print(f"pipeline: {len(nodes)} nodes, {sum(1 for n in nodes if n.metadata.get('context'))} with a context")
    for n in nodes[:3]:
        print(f"  [{n.ref_doc_id}] context: {n.metadata.get('context')}")

    # 2. situate's index and retriever in a query engine (no answer-writing LLM here).
    Settings.llm = MockLLM()
    index = situate.Index(a.work / "index", create=True)
    index.ingest(a.docs, context=a.context)
    engine = RetrieverQueryEngine(
        retriever=SituateRetriever(index, similarity_top_k=3),
        response_synthesizer=get_response_synthesizer(response_mode=ResponseMode.NO_TEXT),
    )
    response = engine.query(a.query)
    for hit in response.source_nodes:
        print(f"hit: {hit.node.metadata['document_id']} score {hit.score or 0:.4f}")
        print(f"  context: {hit.node.metadata['context']}")


if __name__ == "__main__":
    main()
