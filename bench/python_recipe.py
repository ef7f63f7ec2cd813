"""situate's hybrid search through the Python package against the LangChain recipe the
write-ups give for Contextual Retrieval (a vector store + BM25Retriever, fused by an
EnsembleRetriever), with the same MiniLM weights (sentence-transformers through
HuggingFaceEmbeddings) and the same contexts (situate's, exported), on Anthropic's codebase
set, in one run: nDCG@10, Pass@20 and latency per query.

usage: python_recipe.py INDEX DATASET CONTEXTS.jsonl MODEL_DIR
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # BASELINES.md: numpy's threads fight torch's
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from langchain_classic.retrievers import EnsembleRetriever  # noqa: E402
from langchain_community.retrievers import BM25Retriever  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from langchain_huggingface import HuggingFaceEmbeddings  # noqa: E402

import situate  # noqa: E402

index_path, dataset, contexts_file, model_dir = sys.argv[1:5]
torch.set_num_threads(2)

contexts = {}
for line in open(contexts_file, encoding="utf-8"):
    r = json.loads(line)
    contexts[r["chunk_id"]] = r.get("context") if r.get("status") in ("generated", "verified", "manual") else None

corpus = json.load(open(os.path.join(dataset, "codebase_chunks.json"), encoding="utf-8"))
by_golden = {}
docs = []
for d in corpus:
    for c in d["chunks"]:
        by_golden[(d["original_uuid"], c["original_index"])] = c["chunk_id"]
        ctx = contexts.get(c["chunk_id"])
        text = f"{ctx.strip()}\n\n{c['content']}" if ctx and ctx.strip() else c["content"]
        docs.append(Document(page_content=text, metadata={"chunk_id": c["chunk_id"]}))
questions = [json.loads(x) for x in open(os.path.join(dataset, "evaluation_set.jsonl"), encoding="utf-8") if x.strip()]
golden = [{by_golden[(u, i)] for u, i in q["golden_chunk_uuids"]} for q in questions]


def metrics(ranked: list) -> tuple:
    pass20, ndcg = [], []
    for ids, gold in zip(ranked, golden):
        top = ids[:20]
        pass20.append(sum(1 for g in gold if g in top) / len(gold))
        dcg = sum(1 / math.log2(i + 2) for i, c in enumerate(ids[:10]) if c in gold)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(gold))))
        ndcg.append(dcg / ideal)
    return sum(ndcg) / len(ndcg), sum(pass20) / len(pass20)


def run(search) -> tuple:
    search(questions[0]["query"])  # warm-up
    ranked, lat = [], []
    for q in questions:
        t = time.perf_counter()
        ids = search(q["query"])
        lat.append((time.perf_counter() - t) * 1000)
        ranked.append(ids)
    lat.sort()
    return ranked, lat[len(lat) // 2], sum(lat) / len(lat)


start = time.perf_counter()
embeddings = HuggingFaceEmbeddings(model_name=model_dir, encode_kwargs={"normalize_embeddings": True})
store = InMemoryVectorStore.from_documents(docs, embeddings)
bm25 = BM25Retriever.from_documents(docs, k=20)
ensemble = EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": 20})], weights=[0.5, 0.5])
built = time.perf_counter() - start

index = situate.Index(index_path)
rows = [
    ("situate (Index.search, hybrid)", run(lambda q: [h.chunk_id for h in index.search(q, 20).hits])),
    ("LangChain recipe (BM25Retriever + InMemoryVectorStore + EnsembleRetriever)", run(lambda q: [d.metadata["chunk_id"] for d in ensemble.invoke(q)][:20])),
]
print(f"{len(questions)} queries, {len(docs)} chunks, the same contexts ({sum(1 for v in contexts.values() if v)} chunks have one); the recipe's index built in {built:.1f} s")
print("| system | nDCG@10 | Pass@20 | p50 ms/query | mean ms/query |")
print("|---|---|---|---|---|")
for name, (ranked, p50, mean) in rows:
    ndcg, p20 = metrics(ranked)
    print(f"| {name} | {ndcg:.4f} | {p20:.4f} | {p50:.2f} | {mean:.2f} |")
s, lc = rows[0][1], rows[1][1]
print(f"situate is {lc[1] / s[1]:.1f}x faster per query at p50 ({lc[2] / s[2]:.1f}x on the mean)")
