#!/usr/bin/env bash
# The PDF readers compared (BENCHMARKS.md "PDF extraction"), on PDFs whose text is known:
# tests/python/make_documents.py writes report.pdf (4 pages: running header and footer, a
# hyphenated line end, a two-column page drawn row by row, a table, a caption, a Russian and
# a Chinese page) and this script a 300-page long.pdf of the same pages, for speed.
#
#   bench/extract.sh            (about 1 minute; needs python3 with pip)
#
# Readers: situate's (lopdf + pdf-extract's glyphs + situate's layout), pdf-extract's own
# text output, lopdf's extract_text (the two Rust crates situate could have used as they
# are), and as Python peers PDFium (pypdfium2: the C++ library Chrome uses, a native library
# in a registry package) and pypdf. Scores per reader: character error rate of each page
# against the text the generator put there (Markdown marks, table rules and white space
# aside), whether the left column is read whole before the right one, whether the running
# header/footer is gone, and the best of 3 reading times.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
out=bench/out/extract
mkdir -p "$out"
py="$out/venv"
[ -x "$py/bin/python" ] || python3 -m venv "$py"
"$py/bin/python" -m pip install --quiet --disable-pip-version-check \
  fpdf2==2.8.9 python-docx==1.2.0 python-pptx==1.0.2 pypdf==7.1.1 pypdfium2==5.15.2
rm -rf "$out/fixtures"
"$py/bin/python" crates/cli/tests/python/make_documents.py "$out/fixtures"
"$py/bin/python" - "$out/fixtures" <<'PY'
import sys
from pypdf import PdfReader, PdfWriter
d = sys.argv[1]
w = PdfWriter()
r = PdfReader(f"{d}/docs/report.pdf")
for _ in range(75):
    for p in r.pages:
        w.add_page(p)
w.write(f"{d}/long.pdf")
w = PdfWriter()
for _ in range(250):
    for p in r.pages:
        w.add_page(p)
w.write(f"{d}/pages1000.pdf")
PY
cargo build --release --quiet -p situate-ingest --example extract
files=("$out/fixtures/docs/report.pdf" "$out/fixtures/long.pdf")
: > "$out/results.jsonl"
for m in situate pdf-extract lopdf; do
  "$target/release/examples/extract" "$m" 3 "${files[@]}" >> "$out/results.jsonl"
done
"$py/bin/python" - "$out" "${files[@]}" <<'PY'
import json, sys, time
out, files = sys.argv[1], sys.argv[2:]
import pypdfium2, pypdf
def pdfium(path):
    d = pypdfium2.PdfDocument(path)
    return [d[i].get_textpage().get_text_range() for i in range(len(d))]
def pypdf_(path):
    return [p.extract_text() or "" for p in pypdf.PdfReader(path).pages]
with open(f"{out}/results.jsonl", "a") as f:
    for name, fn in [("pdfium (pypdfium2)", pdfium), ("pypdf", pypdf_)]:
        for path in files:
            best = 1e9
            for _ in range(3):
                t = time.perf_counter(); pages = fn(path); best = min(best, time.perf_counter() - t)
            f.write(json.dumps({"file": path, "method": name, "seconds": best, "pages": pages}, ensure_ascii=False) + "\n")
PY
# Memory: situate's reader on a 1,000-page PDF (peak resident set of the whole process),
# beside the file's size.
size=$(stat -c %s "$out/fixtures/pages1000.pdf")
/usr/bin/time -f "%M %e" -o "$out/mem.txt" "$target/release/examples/extract" situate 1 \
  "$out/fixtures/pages1000.pdf" > /dev/null
read -r rss secs < "$out/mem.txt"
echo "1,000-page PDF: $((size / 1024)) KiB on disk, read in ${secs} s, peak RSS $((rss / 1024)) MiB"
"$py/bin/python" - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
truth = json.load(open(f"{out}/fixtures/truth.json"))["report.pdf"]
def norm(t):
    t = t.replace("\ufffe", "-").replace("\u00ad", "-")
    t = re.sub(r"^#+ ", "", t, flags=re.M)
    t = re.sub(r"\|?-{3,}\|", " ", t).replace("|", " ")
    return " ".join(t.split())
def dist(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
rows = {}
for line in open(f"{out}/results.jsonl"):
    r = json.loads(line)
    rows.setdefault(r["method"], {})[r["file"].rsplit("/", 1)[1]] = r
print("| reader | CER, all 4 pages | CER en / ru / zh pages | left column whole | running header/footer gone | hyphen joined | report.pdf (4 pages) | long.pdf (300 pages) |")
print("|---|---|---|---|---|---|---|---|")
for m, by in rows.items():
    pages = by["report.pdf"]["pages"]
    errs = tot = 0
    per = []
    for i, t in enumerate(truth["pages"]):
        ref = norm(t["text"]); got = norm(pages[i] if i < len(pages) else "")
        e = dist(got, ref); errs += e; tot += len(ref); per.append(e / max(1, len(ref)))
    whole = " ".join(norm(p) for p in pages)
    left = "Revenue grew 3% in the third quarter, to 812 million euros, driven by the Nordic region" in whole
    header = "Northwind Annual Report 2025" not in whole and "Page 2 of 4" not in whole
    hyph = "retrieval system" in whole
    print(f"| {m} | {errs/tot:.3f} | {per[0]:.3f} / {per[2]:.3f} / {per[3]:.3f} | {'yes' if left else 'no'} | {'yes' if header else 'no'} | {'yes' if hyph else 'no'} | {by['report.pdf']['seconds']*1000:.1f} ms | {by['long.pdf']['seconds']*1000:.0f} ms |")
PY
