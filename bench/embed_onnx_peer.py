"""The ONNX Runtime embedding peer of `bench/embed.sh`: the same all-MiniLM-L6-v2 weights
situate installs, exported to ONNX by PyTorch's exporter (once, cached beside the venv), and
its int8 form by ONNX Runtime's dynamic quantization (int8 weights, activations quantized per
call: what fastembed ships as its quantized models). Same texts as `embed_peer.py` (SciFact
title + blank line + abstract, the first N passages, batches of 64 sorted by length as
sentence-transformers sorts them; queries one at a time), max 256 tokens, HF `tokenizers`,
mean pooling over the attention mask, normalised. ONNX Runtime's graph optimisations at
their highest level (attention, GELU and LayerNorm fusion), intra-op threads = THREADS, one
inter-op thread.

usage: embed_onnx_peer.py MODEL_DIR DATASET PASSAGES QUERIES THREADS CACHE_DIR [f32|int8]...
Prints one line per variant (speed only: the peer's int8 quality is not what the goal asks;
situate's own quantized paths are checked for quality by `situate-bench`).
"""
import os
import sys
import time

from peer_texts import read

model_dir, dataset, n_passages, n_queries, threads, cache = sys.argv[1:7]
variants = sys.argv[7:] or ["f32", "int8"]
n_passages, n_queries, threads = int(n_passages), int(n_queries), int(threads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

MAX = 256


def export(path):
    """all-MiniLM-L6-v2 (the BERT body; pooling is done here) to ONNX, dynamic batch/length."""
    import torch
    from transformers import AutoModel

    class Body(torch.nn.Module):
        """The BERT body with its inputs by name (transformers 5 takes them as keywords)."""

        def __init__(self):
            super().__init__()
            self.bert = AutoModel.from_pretrained(model_dir).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    model = Body().eval()
    ids = torch.ones((2, 16), dtype=torch.long)
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            path,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "seq"},
                "attention_mask": {0: "batch", 1: "seq"},
                "token_type_ids": {0: "batch", 1: "seq"},
                "last_hidden_state": {0: "batch", 1: "seq"},
            },
            opset_version=17,
            dynamo=False,
        )


os.makedirs(cache, exist_ok=True)
f32_path = os.path.join(cache, "minilm-f32.onnx")
int8_path = os.path.join(cache, "minilm-int8.onnx")
if not os.path.exists(f32_path):
    export(f32_path)
if "int8" in variants and not os.path.exists(int8_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(f32_path, int8_path, weight_type=QuantType.QInt8)

tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
tok.enable_truncation(MAX)
tok.no_padding()
passages = read(os.path.join(dataset, "corpus.jsonl"), n_passages, True)
queries = read(os.path.join(dataset, "queries.jsonl"), n_queries, False)


def embed(sess, texts):
    enc = tok.encode_batch(texts)
    n = max(len(e.ids) for e in enc)
    ids = np.zeros((len(enc), n), dtype=np.int64)
    mask = np.zeros((len(enc), n), dtype=np.int64)
    for i, e in enumerate(enc):
        ids[i, : len(e.ids)] = e.ids
        mask[i, : len(e.ids)] = 1
    (h,) = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    m = mask[:, :, None].astype(np.float32)
    v = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def batches(texts, size=64):
    # sentence-transformers' order: longest first by character length, then batches.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    for s in range(0, len(order), size):
        yield [texts[i] for i in order[s : s + size]]


# The export is checked against BASELINES.md's sentence-transformers reference value.
REFERENCE = ("How do I reset my password?", "Steps to change a forgotten password", 0.809510)

for variant in variants:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(
        f32_path if variant == "f32" else int8_path, opts, providers=["CPUExecutionProvider"]
    )
    embed(sess, passages[:8])  # warm-up
    a, b = embed(sess, list(REFERENCE[:2]))
    cos = float(a @ b)
    if variant == "f32" and abs(cos - REFERENCE[2]) > 1e-4:
        sys.exit(f"the ONNX export disagrees with sentence-transformers: cos {cos:.6f}, expected {REFERENCE[2]}")
    start = time.perf_counter()
    for b in batches(passages):
        embed(sess, b)
    secs = time.perf_counter() - start
    lat = []
    for q in queries:
        t = time.perf_counter()
        embed(sess, [q])
        lat.append(time.perf_counter() - t)
    lat.sort()
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
    print(
        f"onnxruntime {ort.__version__} {variant}: "
        f"{len(passages)} passages in {secs:.2f} s = {len(passages) / secs:.1f} passages/s; "
        f"{len(queries)} queries one at a time: p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms; threads {threads}; "
        f"reference cosine {cos:.6f} (sentence-transformers {REFERENCE[2]})",
        flush=True,
    )
