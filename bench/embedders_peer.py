"""The Python peers of `bench/embedders_speed.sh`: the stronger embedders (EmbeddingGemma-300M,
all-mpnet-base-v2, nomic-embed-text-v1.5) with the same weights situate installs, on the same
texts as `situate-bench embed` (SciFact title + blank line + abstract, the first N passages,
each cut at the model's own window; queries one at a time), with the model's own prompts,
normalised.

  st   MODEL_DIR DATASET PASSAGES QUERIES THREADS
       sentence-transformers on PyTorch CPU (prompts from the folder's config, batches of 32
       sorted by length as sentence-transformers sorts them).
  onnx MODEL_DIR DATASET PASSAGES QUERIES THREADS CACHE_DIR [f32|int8]...
       ONNX Runtime on the transformer body exported by PyTorch's exporter (cached in
       CACHE_DIR, checked against sentence-transformers' vector of one text), f32 and ONNX
       Runtime's dynamic int8 quantization; pooling (mean over the attention mask) and, for
       EmbeddingGemma, its two dense layers in numpy.
  llama MODEL.gguf DATASET PASSAGES QUERIES THREADS
       llama.cpp's embedding mode (llama-cpp-python), the nomic prefixes, batches of 2,048
       tokens.

Prints one line per runtime: passages/s and a query's p50/p99.
"""
import os
import sys
import time

from peer_texts import read

mode, model_path, dataset, n_passages, n_queries, threads = sys.argv[1:7]
n_passages, n_queries, threads = int(n_passages), int(n_queries), int(threads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

passages = read(os.path.join(dataset, "corpus.jsonl"), n_passages, True)
queries = read(os.path.join(dataset, "queries.jsonl"), n_queries, False)


def report(name, secs, lat):
    lat = sorted(lat)
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
    print(
        f"{name}: {len(passages)} passages in {secs:.2f} s = {len(passages) / secs:.1f} passages/s; "
        f"{len(queries)} queries one at a time: p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms; threads {threads}",
        flush=True,
    )


def timed(embed_passages, embed_query):
    embed_passages(passages[:8])  # warm-up
    start = time.perf_counter()
    embed_passages(passages)
    secs = time.perf_counter() - start
    lat = []
    for q in queries:
        t = time.perf_counter()
        embed_query(q)
        lat.append(time.perf_counter() - t)
    return secs, lat


def sentence_transformers():
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_path, device="cpu")
    prompts = getattr(model, "prompts", {}) or {}
    q, d = prompts.get("query", ""), prompts.get("document", "")
    enc = lambda texts, p: model.encode([p + t for t in texts], batch_size=32, normalize_embeddings=True)
    secs, lat = timed(lambda ts: enc(ts, d), lambda t: enc([t], q))
    report(f"sentence-transformers (torch {torch.__version__}, max {model.max_seq_length} tokens)", secs, lat)


def onnx(cache, variants):
    import numpy as np
    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model_path, device="cpu")
    prompts = getattr(st, "prompts", {}) or {}
    q_prompt, d_prompt = prompts.get("query", ""), prompts.get("document", "")
    body = st[0].auto_model.eval()
    gemma = body.config.model_type.startswith("gemma")
    # The dense layers after pooling (EmbeddingGemma's 2_Dense and 3_Dense), applied in numpy.
    dense = [m.linear.weight.detach().numpy() for m in list(st)[2:] if hasattr(m, "linear")]
    name = os.path.basename(os.path.normpath(model_path))
    f32_path = os.path.join(cache, f"{name}-f32.onnx")
    int8_path = os.path.join(cache, f"{name}-int8.onnx")
    os.makedirs(cache, exist_ok=True)

    class Body(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = body

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    if not os.path.exists(f32_path):
        ids = torch.ones((2, 16), dtype=torch.long)
        with torch.no_grad():
            if gemma:
                # The TorchScript tracer cannot follow transformers' vmap-built masks for
                # Gemma 3: the dynamo exporter, dynamic batch and length.
                b, n = torch.export.Dim("b"), torch.export.Dim("n", max=2048)
                torch.onnx.export(
                    Body().eval(), (ids, torch.ones_like(ids)), f32_path,
                    input_names=["input_ids", "attention_mask"], output_names=["h"],
                    dynamic_shapes=({0: b, 1: n}, {0: b, 1: n}), dynamo=True, external_data=True,
                )
            else:
                torch.onnx.export(
                    Body().eval(), (ids, torch.ones_like(ids)), f32_path,
                    input_names=["input_ids", "attention_mask"], output_names=["h"],
                    dynamic_axes={"input_ids": {0: "b", 1: "n"}, "attention_mask": {0: "b", 1: "n"}, "h": {0: "b", 1: "n"}},
                    opset_version=17, dynamo=False,
                )
    if "int8" in variants and not os.path.exists(int8_path):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(f32_path, int8_path, weight_type=QuantType.QInt8)
    tok = st.tokenizer
    limit = st.max_seq_length

    def embed(sess, texts):
        e = tok(texts, padding=True, truncation=True, max_length=limit, return_tensors="np")
        ids, mask = e["input_ids"].astype(np.int64), e["attention_mask"].astype(np.int64)
        (h,) = sess.run(None, {"input_ids": ids, "attention_mask": mask})
        m = mask[:, :, None].astype(np.float32)
        v = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        for w in dense:
            v = v @ w.T
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def batches(texts, size=32):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for s in range(0, len(order), size):
            yield [texts[i] for i in order[s : s + size]]

    check = d_prompt + passages[0]
    want = st.encode([check], normalize_embeddings=True)[0]
    del st
    for variant in variants:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(f32_path if variant == "f32" else int8_path, opts, providers=["CPUExecutionProvider"])
        cos = float(embed(sess, [check])[0] @ want)
        if variant == "f32" and cos < 0.999:
            sys.exit(f"the ONNX export disagrees with sentence-transformers: cosine {cos:.6f}")

        def run_passages(ts):
            for b in batches([d_prompt + t for t in ts]):
                embed(sess, b)

        secs, lat = timed(run_passages, lambda t: embed(sess, [q_prompt + t]))
        report(f"onnxruntime {ort.__version__} {variant} (cosine to sentence-transformers {cos:.6f}{', gemma' if gemma else ''})", secs, lat)


def llama():
    import llama_cpp

    ctx = 2048
    llm = llama_cpp.Llama(model_path=model_path, embedding=True, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx,
                          n_threads=threads, n_threads_batch=threads, verbose=False)

    def run_passages(ts):
        # llama-cpp-python packs a list's texts into batches of up to n_batch tokens.
        llm.embed(["search_document: " + t for t in ts], normalize=True, truncate=True)

    secs, lat = timed(run_passages, lambda t: llm.embed("search_query: " + t, normalize=True, truncate=True))
    report(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}, f16 GGUF)", secs, lat)


if mode == "st":
    sentence_transformers()
elif mode == "onnx":
    onnx(sys.argv[7], sys.argv[8:] or ["f32", "int8"])
elif mode == "llama":
    llama()
else:
    sys.exit(f"unknown mode {mode}: st, onnx or llama")
