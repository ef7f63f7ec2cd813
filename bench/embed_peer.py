"""The embedding peer of `bench/embed.sh`: sentence-transformers on PyTorch CPU with the same
all-MiniLM-L6-v2 weights situate installs, on the same texts (SciFact title + blank line +
abstract, the first N passages; queries one at a time), max 256 tokens, normalised.

usage: embed_peer.py MODEL_DIR DATASET PASSAGES QUERIES THREADS
"""
import os
import sys
import time

from peer_texts import read

model_dir, dataset, n_passages, n_queries, threads = sys.argv[1:6]
n_passages, n_queries, threads = int(n_passages), int(n_queries), int(threads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # BASELINES.md: numpy's threads fight torch's
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

torch.set_num_threads(threads)

passages = read(os.path.join(dataset, "corpus.jsonl"), n_passages, True)
queries = read(os.path.join(dataset, "queries.jsonl"), n_queries, False)
model = SentenceTransformer(model_dir, device="cpu")
model.max_seq_length = 256
model.encode(passages[:8], batch_size=64, normalize_embeddings=True)  # warm-up
start = time.perf_counter()
vectors = model.encode(passages, batch_size=64, normalize_embeddings=True)
secs = time.perf_counter() - start
lat = []
for q in queries:
    t = time.perf_counter()
    model.encode([q], normalize_embeddings=True)
    lat.append(time.perf_counter() - t)
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
print(
    f"sentence-transformers (torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}): "
    f"{len(passages)} passages in {secs:.2f} s = {len(passages) / secs:.1f} passages/s; "
    f"{len(queries)} queries one at a time: p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms; threads {threads}"
)
