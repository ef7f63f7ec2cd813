"""The peer for situate's BM25 benchmark: bm25s on a BEIR data set, one thread.

Prints one JSON object: queries per second (best of --repeat runs of the whole query set,
tokenising included, as bm25s's own benchmark does) and nDCG@10 / recall@k computed the
same way situate's harness does (linear gains, log2 discount).
"""
import argparse
import json
import math
import os
import time

import bm25s
import Stemmer


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path):
    qrels = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            cols = line.rstrip("\n").split("\t")
            if i == 0 and cols[0] == "query-id":
                continue
            qrels.setdefault(cols[0], {})[cols[1]] = float(cols[2])
    return qrels


def ndcg_at(ranked, rel, k):
    dcg = sum(rel.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lang", choices=["en", "ru"], default="en",
                    help="stop words and Snowball stemmer: English or Russian")
    a = ap.parse_args()

    corpus = read_jsonl(os.path.join(a.dataset, "corpus.jsonl"))
    ids = [d["_id"] for d in corpus]
    texts = [(d.get("title") or "") + "\n\n" + (d.get("text") or "") for d in corpus]
    queries = {q["_id"]: q["text"] for q in read_jsonl(os.path.join(a.dataset, "queries.jsonl"))}
    qrels = read_qrels(os.path.join(a.dataset, "qrels", a.split + ".tsv"))
    qids = sorted(qrels)
    qtexts = [queries[q] for q in qids]

    stemmer = Stemmer.Stemmer({"en": "english", "ru": "russian"}[a.lang])
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index(bm25s.tokenize(texts, stopwords=a.lang, stemmer=stemmer, show_progress=False), show_progress=False)

    def run_once():
        tok = bm25s.tokenize(qtexts, stopwords=a.lang, stemmer=stemmer, show_progress=False)
        return retriever.retrieve(tok, k=a.k, n_threads=1, show_progress=False)[0]

    run_once()
    best = float("inf")
    results = None
    for _ in range(a.repeat):
        t = time.perf_counter()
        results = run_once()
        best = min(best, time.perf_counter() - t)
    ndcg = [ndcg_at([ids[j] for j in row], qrels[q], 10) for q, row in zip(qids, results)]
    def recall_at(k):
        vals = []
        for q, row in zip(qids, results):
            rel = {d for d, g in qrels[q].items() if g > 0}
            vals.append(len(rel & {ids[j] for j in row[:k]}) / len(rel) if rel else 0.0)
        return sum(vals) / len(vals)
    print(json.dumps({
        "peer": "bm25s " + bm25s.__version__,
        "queries": len(qids),
        "k": a.k,
        "best_seconds": best,
        "queries_per_second": len(qids) / best,
        "ndcg_at_10": sum(ndcg) / len(ndcg),
        "recall_at_10": recall_at(10),
        "recall_at_20": recall_at(20) if a.k >= 20 else None,
        "threads": 1,
    }, indent=2))


if __name__ == "__main__":
    main()
