"""The README's Python examples run as written (in one process, in a folder holding the
files they name), with situate's local LLM writing the contexts they ask for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Python\n") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def models_dir() -> str:
    if os.environ.get("SITUATE_MODELS"):
        return os.environ["SITUATE_MODELS"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "situate", "models")


def test_the_readme_python_examples_run(tmp_path: Path) -> None:
    blocks = python_blocks()
    assert len(blocks) == 4, "the README's Python section: the package, LangChain, LlamaIndex, Haystack"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "refunds.md").write_text("# Refunds\n\nRefunds are paid within 30 days of a return.\n")
    (tmp_path / "report.md").write_text("# Q3 report\n\nRevenue grew 3% over the previous quarter.\n")
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks) + "\nprint('README-OK', len(docs), len(hits), len(chunks), len(nodes))\n")
    # Contexts the examples keep by default go to this test's folder, not the user's cache.
    env = {**os.environ, "SITUATE_MODELS": models_dir(), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1].split()
    assert last[0] == "README-OK" and all(int(n) > 0 for n in last[1:]), done.stdout
    assert "kb/1" in done.stdout
