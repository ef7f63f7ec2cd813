"""Writes the cross-encoder directories `bench/rerank.sh` times (no cross-encoder weights
install here, see shared/MODELS.md, so these have the shapes of real rerankers, not their
training):

- minilm-l6: all-MiniLM-L6-v2's encoder and pooler (situate's installed model) with a
  seeded random one-label head: the shape of cross-encoder/ms-marco-MiniLM-L-6-v2;
- bert-base: a seeded random 12-layer, 768-wide BERT with the same vocabulary and head: the
  size of bge-reranker-base / ms-marco base models.

Both are BertForSequenceClassification directories (bert.* weights, classifier.*) that
sentence-transformers' CrossEncoder and situate load alike.

usage: cross_encoder_dirs.py MINILM_DIR OUT_DIR
"""
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

minilm, out = sys.argv[1:3]
rng = np.random.default_rng(20261201)


def head(hidden):
    return {
        "classifier.weight": (rng.standard_normal((1, hidden)) * 0.05).astype(np.float32),
        "classifier.bias": np.zeros(1, dtype=np.float32),
    }


def write(name, config, weights):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    config = dict(config, architectures=["BertForSequenceClassification"],
                  id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    for t in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
        shutil.copy(os.path.join(minilm, t), d)
    save_file(weights, os.path.join(d, "model.safetensors"))
    print(d)


config = json.load(open(os.path.join(minilm, "config.json")))
base = load_file(os.path.join(minilm, "model.safetensors"))
weights = {f"bert.{k}": v for k, v in base.items() if not k.startswith("embeddings.position_ids")}
weights.update(head(config["hidden_size"]))
write("minilm-l6", config, weights)

big = dict(config, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
           intermediate_size=3072)
h, inter, v = 768, 3072, config["vocab_size"]


def rand(*shape, scale=0.02):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def norm(prefix):
    return {f"{prefix}.weight": np.ones(h, np.float32), f"{prefix}.bias": np.zeros(h, np.float32)}


w = {
    "bert.embeddings.word_embeddings.weight": rand(v, h),
    "bert.embeddings.position_embeddings.weight": rand(512, h),
    "bert.embeddings.token_type_embeddings.weight": rand(2, h),
    **norm("bert.embeddings.LayerNorm"),
    "bert.pooler.dense.weight": rand(h, h),
    "bert.pooler.dense.bias": np.zeros(h, np.float32),
}
for i in range(12):
    p = f"bert.encoder.layer.{i}"
    for m, (o, n) in {
        "attention.self.query": (h, h), "attention.self.key": (h, h),
        "attention.self.value": (h, h), "attention.output.dense": (h, h),
        "intermediate.dense": (inter, h), "output.dense": (h, inter),
    }.items():
        w[f"{p}.{m}.weight"] = rand(o, n)
        w[f"{p}.{m}.bias"] = np.zeros(o, np.float32)
    w.update(norm(f"{p}.attention.output.LayerNorm"))
    w.update(norm(f"{p}.output.LayerNorm"))
w.update(head(h))
write("bert-base", big, w)
