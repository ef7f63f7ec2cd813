#!/usr/bin/env python3
"""Anthropic's codebase set restricted to the questions whose golden documents an index holds.

    bench/subset_questions.py SHARED_DATA_DIR INDEX_DIR OUT_DIR

Writes OUT_DIR/evaluation_set.jsonl (the questions whose every golden document is stored in
INDEX_DIR's cards.db) beside a link to the whole corpus (OUT_DIR/codebase_chunks.json), so
that `situate eval --dataset OUT_DIR` measures contexts written for part of the corpus on the
questions they can answer, against the whole corpus (a partial run's signal, not a result).
"""
import json
import os
import sqlite3
import sys

data, index, out = sys.argv[1:4]
corpus = os.path.join(data, "anthropic-codebase", "codebase_chunks.json")
docs = json.load(open(corpus))
by_id = {d["doc_id"]: d["original_uuid"] for d in docs}
db = sqlite3.connect(f"file:{os.path.join(index, 'cards.db')}?mode=ro", uri=True)
stored = {by_id.get(r[0], r[0]) for r in db.execute("SELECT document_id FROM documents")}
os.makedirs(out, exist_ok=True)
kept = 0
with open(os.path.join(out, "evaluation_set.jsonl"), "w") as f:
    for line in open(os.path.join(data, "anthropic-codebase", "evaluation_set.jsonl")):
        q = json.loads(line)
        if set(q["golden_doc_uuids"]) <= stored:
            f.write(line)
            kept += 1
link = os.path.join(out, "codebase_chunks.json")
if not os.path.exists(link):
    os.symlink(os.path.abspath(corpus), link)
print(f"{kept} questions over {len(stored)} of {len(docs)} documents")
