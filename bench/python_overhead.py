"""The Python package's search against the same search in Rust (`situate-bench query`), on
the same index and queries, in one run: the overhead per call at p50, and queries/s with 4
Python threads against one (the GIL is released during each search).

usage: python_overhead.py SITUATE_BENCH INDEX QUERIES [ROUNDS]
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import situate

bench, index_path, queries_file = sys.argv[1:4]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
queries = [q for q in open(queries_file, encoding="utf-8").read().splitlines() if q.strip()]
index = situate.Index(index_path)


def pct(values: list, p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, round(p * (len(v) - 1)))]


def python_one_thread() -> tuple:
    lat = []
    start = time.perf_counter()
    for q in queries:
        t = time.perf_counter()
        index.search(q, 20)
        lat.append((time.perf_counter() - t) * 1000)
    return lat, len(queries) / (time.perf_counter() - start)


def in_process() -> tuple:
    """The package's own share, in this process: the native call (the engine's search and
    its answer as JSON, the GIL released) against the whole `Index.search` (the request
    body, that call, the JSON read and the dataclasses built), query by query."""
    import json as _json

    native, whole = [], []
    for q in queries:
        body = _json.dumps({"query": q, "k": 20})
        t = time.perf_counter()
        index._native.search(body)
        native.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        index.search(q, 20)
        whole.append((time.perf_counter() - t) * 1000)
    return pct(native, 0.5), pct(whole, 0.5), pct([w - n for w, n in zip(whole, native)], 0.5)


def python_threads(n: int) -> float:
    parts = [queries[i::n] for i in range(n)]
    errors: list = []

    def work(qs: list) -> None:
        try:
            for q in qs:
                index.search(q, 20)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(p,)) for p in parts]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return len(queries) / (time.perf_counter() - start)


def rust() -> tuple:
    out = subprocess.run(
        [bench, "query", "--index", index_path, "--queries", queries_file, "--k", "20", "--repeat", "2", "--threads", "4"],
        capture_output=True, text=True, check=True,
    ).stdout
    m = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms, ([\d.]+) queries/s; .*p50 ([\d.]+) ms; 4 threads: ([\d.]+) queries/s", out)
    assert m, out
    return tuple(float(g) for g in m.groups())


python_one_thread()  # warm-up: the model, the engines, the pages
python_threads(4)
for r in range(rounds):
    rust_p50, rust_p99, rust_qps, rust_json_p50, rust_qps4 = rust()
    lat, qps1 = python_one_thread()
    qps4 = python_threads(4)
    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
    print(f"round {r + 1}: {len(queries)} queries, k 20, hybrid")
    print(f"  rust (situate-bench query):  p50 {rust_p50:.3f} ms, p99 {rust_p99:.3f} ms, {rust_qps:.1f} queries/s (with the answer as JSON: p50 {rust_json_p50:.3f} ms)")
    print(f"  python (Index.search):       p50 {p50:.3f} ms, p99 {p99:.3f} ms, {qps1:.1f} queries/s")
    print(f"  overhead at p50: {p50 - rust_p50:+.3f} ms ({(p50 / rust_p50 - 1) * 100:+.1f}%)")
    native, whole, share = in_process()
    print(f"  in this process: the native call p50 {native:.3f} ms, Index.search p50 {whole:.3f} ms; the package's share per query p50 {share:.3f} ms")
    print(f"  4 threads: python {qps4:.1f} queries/s = {qps4 / qps1:.2f}x one thread; rust {rust_qps4:.1f} queries/s = {rust_qps4 / rust_qps:.2f}x")
