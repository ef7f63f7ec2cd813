"""Contextual Retrieval in LangChain, with situate.

The recipe the write-ups give: split the documents, ask an LLM for each chunk's context,
put it before the chunk, then index the chunks twice (a vector store and a BM25Retriever)
and fuse the two with an EnsembleRetriever. With situate:

1. ``SituateContextualizer`` splits and writes the contexts (situate's local LLM: no API
   key, nothing leaves the machine), for those who keep their own vector store;
2. or, in place of vector store + BM25 + ensemble: one situate index, whose hybrid search
   (contextual BM25 + vectors, fused by rank) is ``SituateRetriever``.

Run: python langchain_contextual_retrieval.py DOCS_DIR QUERY [--context llm|structural]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from langchain_core.documents import Document

import situate
from situate.langchain import SituateContextualizer, SituateRetriever


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs", type=Path)
    ap.add_argument("query")
    ap.add_argument("--context", default="llm", help="llm (the recipe), document+llm, structural")
    ap.add_argument("--work", type=Path, default=Path(tempfile.mkdtemp(prefix="situate-example-")))
    a = ap.parse_args()

    files = sorted(p for p in a.docs.rglob("*.md"))
    documents = [Document(page_content=p.read_text(encoding="utf-8"), metadata={"source": p.name}) for p in files]

    # 1. Contexts for your own store: each chunk with its context before it.
    contextualizer = SituateContextualizer(context=a.context, path=a.work / "contexts")
    chunks = contextualizer.transform_documents(documents)
    print(f"contextualized {len(chunks)} chunks of {len(documents)} documents")
    for c in chunks[:3]:
        print(f"  [{c.metadata['chunk_id']}] {c.metadata['context_status']}: {c.metadata['context']}")

    # 2. Or let situate keep the index: contextual BM25 + vectors, fused.
    index = situate.Index(a.work / "index", create=True)
    out = index.ingest(a.docs, context=a.context)
    print(f"indexed {out.report.chunks} chunks, {out.report.contexts_rejected} contexts rejected by situate's checks")
    retriever = SituateRetriever(index=index, k=3)
    for d in retriever.invoke(a.query):
        legs = ", ".join(f"{leg['leg']} #{leg['rank']}" for leg in d.metadata["legs"])
        print(f"hit {d.metadata['rank']}: {d.metadata['document_id']} ({legs})")
        print(f"  context ({d.metadata['context_status']}): {d.metadata['context']}")
        print(f"  original: {d.page_content[:100]!r}")


if __name__ == "__main__":
    main()
