"""The llama.cpp peer of `bench/llm_speed.sh`: the same GGUF file through llama.cpp (the
`llama-cpp-python` package, which vendors llama.cpp and builds it from source), on the same
machine and threads, in two measurements:

  speed PROMPT_TOKENS NEW_TOKENS: llama-bench's pp/tg: a prompt of the same token ids
      situate-bench generate reads, in one batch, then tokens generated one at a time
      (greedy); llama.cpp's own timers (llama_perf_context).
  contexts PROMPTS.jsonl MAX_TOKENS: the exact prompts `situate-bench contexts
      --prompts-out` wrote (one line per chunk: its document and its whole prompt, chat
      template included), one after the other in one Llama object, greedy, at most
      MAX_TOKENS each; llama.cpp reuses the longest common prefix of consecutive prompts
      (the document), as situate does. Prints contexts/s and writes the replies beside.

usage: llama_cpp_peer.py MODEL.gguf THREADS speed PROMPT_TOKENS NEW_TOKENS
       llama_cpp_peer.py MODEL.gguf THREADS contexts PROMPTS.jsonl MAX_TOKENS
"""
import json
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama

model, threads, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def perf(llm):
    p = llama_cpp.llama_perf_context(llm.ctx)
    return p.t_p_eval_ms / 1000, p.n_p_eval, p.t_eval_ms / 1000, p.n_eval


if mode == "speed":
    n_prompt, n_new = int(sys.argv[4]), int(sys.argv[5])
    llm = Llama(model_path=model, n_ctx=n_prompt + n_new + 16, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    # The ids situate-bench generate uses.
    ids = [1000 + (i * 7919) % 30000 for i in range(n_prompt)]
    llama_cpp.llama_perf_context_reset(llm.ctx)
    llm.eval(ids)
    def last():
        p = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.ctypeslib.as_array(p, shape=(llm.n_vocab(),)).argmax())

    tok = last()
    for _ in range(n_new):
        llm.eval([tok])
        tok = last()
    tp, np_, te, ne = perf(llm)
    print(f"llama.cpp prompt: {np_} tokens in {tp:.2f} s = {np_ / tp:.1f} tokens/s")
    print(f"llama.cpp generation: {ne} tokens in {te:.2f} s = {ne / te:.1f} tokens/s")
elif mode == "contexts":
    path, max_tokens = sys.argv[4], int(sys.argv[5])
    rows = [json.loads(line) for line in open(path) if line.strip()]
    longest = max(len(r["prompt"]) for r in rows)
    llm = Llama(model_path=model, n_ctx=32768, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    need = max(len(llm.tokenize(r["prompt"].encode(), add_bos=False, special=True)) for r in rows)
    llama_cpp.llama_perf_context_reset(llm.ctx)
    started = time.time()
    replies = []
    for r in rows:
        out = llm.create_completion(r["prompt"], max_tokens=max_tokens, temperature=0.0,
                                    top_k=1, repeat_penalty=1.0, stop=["<|im_end|>", "<|endoftext|>"])
        replies.append({"chunk": r["chunk"], "text": out["choices"][0]["text"].strip()})
    wall = time.time() - started
    tp, np_, te, ne = perf(llm)
    print(f"llama.cpp: {len(rows)} contexts in {wall:.1f} s = {len(rows) / wall:.3f} contexts/s; "
          f"prompt {np_} tokens at {np_ / max(tp, 1e-9):.1f} tokens/s, generation {ne} tokens at "
          f"{ne / max(te, 1e-9):.1f} tokens/s (longest prompt {need} tokens)")
    with open(path.rsplit(".", 1)[0] + ".llama_cpp.jsonl", "w") as f:
        for r in replies:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
else:
    sys.exit(f"unknown mode {mode}: speed or contexts")
