"""A Haystack pipeline whose retriever is situate.

Run: python haystack_pipeline.py INDEX_DIR QUERY
"""

from __future__ import annotations

import sys

from haystack import Pipeline

from situate.haystack import SituateRetriever


def main() -> None:
    index, query = sys.argv[1], sys.argv[2]
    pipeline = Pipeline()
    pipeline.add_component("retriever", SituateRetriever(index, top_k=3))
    for d in pipeline.run({"retriever": {"query": query}})["retriever"]["documents"]:
        print(f"hit: {d.meta['document_id']} score {d.score:.4f}")
        print(f"  context: {d.meta['context']}")


if __name__ == "__main__":
    main()
