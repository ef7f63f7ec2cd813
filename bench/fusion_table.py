"""The fusion table and the leave-one-set-out defaults (issue 60), from bench/fusion.sh's
outputs: OUT/SET-EMBEDDER/report.json (each leg and hybrid search at the index's default,
by `situate eval`) and OUT/SET-EMBEDDER/tune.json (every grid point's nDCG@10, by `situate
tune --report-grid`).

For each embedder family with all four sets, each set in turn is held out: the point
(fusion, RRF k, α) with the best mean gain over the better leg on the other three sets is
chosen, and reported on the held-out set. The default is then chosen the same way on all
four. An English-only family (fusion_defaults::for_corpus, situate_embed::english_only) on a
corpus mostly in another language records α 0 by rule (the hybrid ranks as BM25): its
non-English sets are reported at α 0 and take no part in choosing its α; the point the
other sets choose is shown beside, for comparison.
Run: python3 bench/fusion_table.py bench/out/fusion
"""
import json
import os
import sys
from collections import defaultdict

SETS = ["codebase", "xquad-en", "xquad-ru", "scifact"]
out = sys.argv[1] if len(sys.argv) > 1 else "bench/out/fusion"


def family(embedder: str) -> str:
    return embedder.split("-q8")[0]


# The families situate_embed::english_only names, and the sets mostly in another language.
ENGLISH_ONLY = {"all-minilm-l6-v2", "all-mpnet-base-v2", "nomic-embed-text-v1.5"}
NON_ENGLISH = {"xquad-ru"}


def by_rule(fam: str, s: str) -> bool:
    """Whether the index of `fam` on set `s` records α 0 by the language rule."""
    return fam in ENGLISH_ONLY and s in NON_ENGLISH


def key(p):
    return (p["fusion"], p.get("rrf_k"), round(p["alpha"], 4))


def label(k):
    f, rrf_k, a = k
    return (f"rrf k {rrf_k:g}" if f == "rrf" else f) + f", α {a:.2f}"


runs = {}
for d in sorted(os.listdir(out)):
    rp, tp = os.path.join(out, d, "report.json"), os.path.join(out, d, "tune.json")
    if not (os.path.exists(rp) and os.path.exists(tp)):
        continue
    s = next((x for x in SETS if d.startswith(x + "-")), None)
    if s is None:
        continue
    emb = d[len(s) + 1:]
    rows = {c["mode"]: c["metrics"]["ndcg@10"] for c in json.load(open(rp))["configurations"]}
    t = json.load(open(tp))
    grid = {key(p): p["score"] for p in t["grid"]}
    runs[(s, emb)] = {
        "bm25": rows.get("bm25"),
        "vector": rows.get("vector"),
        "hybrid": rows.get("hybrid"),
        "tune_bm25": t["bm25_alone"],
        "tune_vector": t["vector_alone"],
        "grid": grid,
    }

print("## The fusion table (nDCG@10; each fusion at its best α on the set itself, an oracle)\n")
print("| set | embedder | BM25 | vector | `situate eval` hybrid (RRF k 60, the default then) | grid: rrf k 60 α 0.5 | best rrf | best minmax | best tm2c2 | best zscore |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (s, emb), r in sorted(runs.items(), key=lambda x: (x[0][1], SETS.index(x[0][0]))):
    g = r["grid"]
    best = {}
    for f in ["rrf", "minmax", "tm2c2", "zscore"]:
        pts = [(v, k) for k, v in g.items() if k[0] == f]
        best[f] = max(pts) if pts else (float("nan"), None)
    rrf60 = g.get(("rrf", 60.0, 0.5), float("nan"))
    cells = " | ".join(f"{v:.4f} ({k[2]:.2f}{'' if f != 'rrf' else f', k {k[1]:g}'})" if k else "–" for f, (v, k) in best.items())
    print(f"| {s} | {emb} | {r['bm25']:.4f} | {r['vector']:.4f} | {r['hybrid']:.4f} | {rrf60:.4f} | {cells} |")

fams = defaultdict(dict)
for (s, emb), r in runs.items():
    fams[family(emb)][s] = r


RULE = os.environ.get("RULE", "mean")


def choose(sets, rs):
    """The point with the best mean gain over the better leg on `sets` (ties: the better
    worst case); RULE=worst: the best worst case (ties: the better mean)."""
    common = set.intersection(*(set(rs[s]["grid"]) for s in sets))
    best_leg = {s: max(rs[s]["bm25"], rs[s]["vector"]) for s in sets}
    scored = []
    for k in common:
        gains = [rs[s]["grid"][k] - best_leg[s] for s in sets]
        mean, worst = sum(gains) / len(gains), min(gains)
        scored.append(((mean, worst) if RULE == "mean" else (worst, mean), k))
    scored.sort(key=lambda x: (-x[0][0], -x[0][1], x[1]))
    return scored[0][1]


print(f"\n## Leave one set out (chosen on the other sets by the {RULE} gain over the better leg, reported on the one left out)\n")
print("| embedder family | set left out | chosen on the other sets | nDCG@10 | better leg | vs better leg | RRF k 60 (eval) vs better leg |")
print("|---|---|---|---|---|---|---|")
defaults = {}
for fam, rs in sorted(fams.items()):
    have = [s for s in SETS if s in rs]
    tuned = [s for s in have if not by_rule(fam, s)]
    if len(tuned) < 2:
        continue
    for h in have:
        train = [s for s in tuned if s != h]
        k = choose(train, rs)
        leg = max(rs[h]["bm25"], rs[h]["vector"])
        v = rs[h]["grid"].get(k, float("nan"))
        chosen = label(k)
        if by_rule(fam, h):
            chosen = f"α 0 by the language rule (the point of the other sets, {label(k)}: {v:.4f}, {v - leg:+.4f})"
            v = rs[h]["bm25"]
        print(f"| {fam} | {h} | {chosen} | {v:.4f} | {leg:.4f} | {v - leg:+.4f} | {rs[h]['hybrid'] - leg:+.4f} |")
    defaults[fam] = (choose(tuned, rs), have)

print("\n## The defaults (chosen on every set the family has), on each set\n")
print("| embedder family | default | sets | worst vs better leg | sets ≥ better leg + 0.01 |")
print("|---|---|---|---|---|")
for fam, (k, have) in sorted(defaults.items()):
    rs = fams[fam]
    diffs = [(rs[s]["bm25"] if by_rule(fam, s) else rs[s]["grid"][k]) - max(rs[s]["bm25"], rs[s]["vector"]) for s in have]
    print(f"| {fam} | {label(k)} | {len(have)} | {min(diffs):+.4f} | {sum(d >= 0.01 for d in diffs)} of {len(have)} |")
print("\nTable rows for crates/engine/src/fusion_defaults.rs:")
for fam, (k, _) in sorted(defaults.items()):
    f, rrf_k, a = k
    print(f'    Row {{ family: "{fam}", fusion: "{f}", rrf_k: {"Some(%g.0)" % rrf_k if rrf_k else "None"}, alpha: {a} }},')

# One default for every family (chosen on the other sets of every family), for comparison:
# does a fusion per family pay?
pairs = {(fam, s): rs[s] for fam, rs in fams.items() for s in rs}
if len({s for _, s in pairs}) >= 2:
    print("\n## One default for every family, leave one set out\n")
    print("| set left out | chosen on the other sets (every family) | mean vs better leg on it | worst |")
    print("|---|---|---|---|")
    for h in SETS:
        train = {k: v for k, v in pairs.items() if k[1] != h}
        test = {k: v for k, v in pairs.items() if k[1] == h}
        if not train or not test:
            continue
        keyed = {f"{f}/{s}": r for (f, s), r in train.items()}
        k = choose(list(keyed), keyed)
        diffs = [r["grid"][k] - max(r["bm25"], r["vector"]) for r in test.values() if k in r["grid"]]
        print(f"| {h} | {label(k)} | {sum(diffs) / len(diffs):+.4f} | {min(diffs):+.4f} |")
