"""Writes the reference vectors that situate's forward passes are tested against
(`crates/embed/fixtures/NAME.json`), with the weights situate installed, on English, Russian
and Chinese texts, a line of code and a text of about 1,500 tokens, as queries and as
documents (the model's own prompts), normalised, f32:
- sentence-transformers on PyTorch CPU for a sentence-transformers folder
  (EmbeddingGemma-300M, all-mpnet-base-v2);
- llama.cpp's embedding mode (llama-cpp-python) for a GGUF (nomic-embed-text-v1.5, whose
  prefixes `search_query: ` / `search_document: ` are given with `--prefixes`).

usage: bench/.venv-torch/bin/python bench/reference_vectors.py NAME MODEL_DIR OUT.json
       bench/out/venv-llama/bin/python bench/reference_vectors.py NAME MODEL.gguf OUT.json \
           --prefixes "search_query: " "search_document: "

The venvs are the ones bench/embed.sh (PyTorch, sentence-transformers) and
bench/llm_speed.sh (llama-cpp-python) make. Run once per model; the fixture is committed,
so tests need neither Python nor PyTorch.
"""
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PAIRS = [
    ("How do I reset my password?",
     "Steps to change a forgotten password: open the settings page and choose Reset."),
    ("Какой город является столицей Франции?",
     "Париж — столица и крупнейший город Франции, он стоит на реке Сена."),
    ("法国的首都是哪个城市？", "巴黎是法国的首都和最大的城市，位于塞纳河畔。"),
    ("parse a TOML configuration file",
     'fn load(path: &Path) -> Result<Config> { let text = fs::read_to_string(path)?; toml::from_str(&text).map_err(Error::from) }'),
]


def long_text():
    """About 1,500 tokens of varied prose, made the same way every time."""
    modules = ["ingest", "chunker", "contextualizer", "indexer", "scorer", "fusion", "reranker",
               "store", "planner", "worker", "cache", "reader"]
    verbs = ["reads", "writes", "checks", "merges", "splits", "counts", "ranks", "loads"]
    things = ["records", "cards", "segments", "vectors", "pages", "postings", "contexts", "tables"]
    places = ["the shared store", "a local cache", "the review queue", "the snapshot", "the log"]
    out = []
    for i in range(56):
        m = modules[i % len(modules)]
        v = verbs[(i * 3) % len(verbs)]
        t = things[(i * 5) % len(things)]
        p = places[(i * 7) % len(places)]
        out.append(f"In step {i + 1}, the {m} {v} {17 * i % 97 + 3} {t} from {p}"
                   f" and reports how long it took to the operator.")
    return " ".join(out)


def write(out, doc):
    """The fixture as JSON with one text (and its vector) per line."""
    head = {k: v for k, v in doc.items() if k != "texts"}
    with open(out, "w") as f:
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "texts": [\n')
        f.write(",\n".join(json.dumps(t, ensure_ascii=False) for t in doc["texts"]))
        f.write("\n]}\n")


def texts_of():
    texts = []
    for q, d in PAIRS:
        texts.append({"kind": "query", "text": q})
        texts.append({"kind": "passage", "text": d})
    texts.append({"kind": "passage", "text": long_text()})
    return texts


def sentence_transformers(name, model_dir, out):
    import torch
    import sentence_transformers as st

    torch.set_num_threads(2)
    model = st.SentenceTransformer(model_dir, device="cpu")
    prompts = getattr(model, "prompts", {}) or {}
    q_prompt = prompts.get("query", "")
    d_prompt = prompts.get("document", "")
    texts = texts_of()
    for t in texts:
        prompt = q_prompt if t["kind"] == "query" else d_prompt
        with torch.no_grad():
            v = model.encode([prompt + t["text"]], normalize_embeddings=True,
                             convert_to_numpy=True)[0]
        t["tokens"] = len(model.tokenizer(prompt + t["text"])["input_ids"])
        t["vector"] = [round(float(x), 7) for x in v]
    write(out, {
        "model": name,
        "reference": "sentence-transformers " + st.__version__ + ", torch " + torch.__version__,
        "max_seq_length": model.max_seq_length,
        "query_prompt": q_prompt,
        "document_prompt": d_prompt,
        "texts": texts,
    })
    return texts


def llama_cpp(name, gguf, out, q_prompt, d_prompt):
    import llama_cpp

    ctx = 2048
    llm = llama_cpp.Llama(model_path=gguf, embedding=True, n_ctx=ctx, n_batch=ctx,
                          n_ubatch=ctx, n_threads=2, verbose=False)
    texts = texts_of()
    for t in texts:
        prompt = q_prompt if t["kind"] == "query" else d_prompt
        text = prompt + t["text"]
        t["tokens"] = len(llm.tokenize(text.encode("utf-8"), add_bos=True, special=False))
        v = llm.embed(text, normalize=True, truncate=True)
        t["vector"] = [round(float(x), 7) for x in v]
    write(out, {
        "model": name,
        "reference": "llama.cpp (llama-cpp-python " + llama_cpp.__version__ + "), mean pooling",
        "max_seq_length": ctx,
        "query_prompt": q_prompt,
        "document_prompt": d_prompt,
        "texts": texts,
    })
    return texts


def main():
    name, model, out = sys.argv[1:4]
    if model.endswith(".gguf"):
        q, d = sys.argv[5:7] if sys.argv[4:5] == ["--prefixes"] else ("", "")
        texts = llama_cpp(name, model, out, q, d)
    else:
        texts = sentence_transformers(name, model, out)
    print(name, [t["tokens"] for t in texts])


if __name__ == "__main__":
    main()
