"""The reranking peer of `bench/rerank.sh`: sentence-transformers' CrossEncoder on PyTorch
CPU scores the pairs situate scored (the JSONL `situate bench rerank --pairs` writes: each
query with its passages as the reranker read them, and situate's scores), one query at a
time, and reports its latency and how far its scores are from situate's.

usage: rerank_peer.py MODEL_DIR PAIRS.jsonl THREADS
"""
import json
import os
import sys
import time

model_dir, pairs, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from sentence_transformers import CrossEncoder  # noqa: E402

torch.set_num_threads(threads)
rows = [json.loads(line) for line in open(pairs) if line.strip()]
model = CrossEncoder(model_dir, device="cpu", max_length=512)
model.predict([(rows[0]["query"], p) for p in rows[0]["passages"][:4]], batch_size=16)  # warm-up
lat, worst, n = [], 0.0, 0
for r in rows:
    t = time.perf_counter()
    scores = model.predict([(r["query"], p) for p in r["passages"]], batch_size=16)
    lat.append(time.perf_counter() - t)
    n += len(r["passages"])
    worst = max([worst] + [abs(float(a) - b) for a, b in zip(scores, r["scores"])])
total = sum(lat)
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
print(
    f"sentence-transformers CrossEncoder (torch {torch.__version__}): {len(rows)} queries ({n} passages): "
    f"p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms per query, {n / total:.1f} passages/s; "
    f"largest score difference from situate {worst:.2e}; threads {threads}"
)
