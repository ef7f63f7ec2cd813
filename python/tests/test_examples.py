"""The examples run as a user runs them, on the small corpus, with situate's local LLM
writing the contexts (the recipe as given)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def small_corpus(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "acme-q3.md").write_text(
        "# ACME Q3 2026 report\n\nRevenue grew 3% over the previous quarter, to 41 million dollars.\n\n"
        "## Offices\n\nThe Berlin office opened in August with twelve engineers.\n"
    )
    (docs / "tea.md").write_text("# Tea\n\nSteep green tea at 80 degrees for two minutes.\n")
    return docs


def test_the_langchain_example(tmp_path: Path) -> None:
    out = run(str(EXAMPLES / "langchain_contextual_retrieval.py"), str(small_corpus(tmp_path)), "how much did ACME revenue grow?", "--work", str(tmp_path / "w"))
    assert "contextualized 2 chunks of 2 documents" in out and "hit 1: docs/acme-q3.md" in out, out


def test_the_llama_index_example(tmp_path: Path) -> None:
    out = run(str(EXAMPLES / "llama_index_contextual_retrieval.py"), str(small_corpus(tmp_path)), "when did the Berlin office open?", "--work", str(tmp_path / "w"))
    assert "pipeline: 2 nodes" in out and "hit: docs/acme-q3.md" in out, out


def test_the_haystack_example(built_index: Path) -> None:
    out = run(str(EXAMPLES / "haystack_pipeline.py"), str(built_index), "replace the lamp bulb")
    assert out.splitlines()[0].startswith("hit: docs/lamp.md"), out
