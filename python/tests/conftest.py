"""Fixtures: a small corpus, a real index over it (the default embedder, installed by the
test command), and `situate serve` on a copy of it for the client's tests.

SITUATE_BIN names the `situate` binary the service runs from (scripts/test.sh sets it);
without it the client's tests are skipped, never faked.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import situate

DOCS = {
    "keys.md": "# Key rotation\n\n## Rotating the signing keys\n\nRun `vault rotate` every 90 days; "
    "the old key stays valid for 24 hours so that tokens in flight still verify.\n\n"
    "## Revoking a key\n\nA leaked key is revoked at once with `vault revoke --now`.\n",
    "deploy.md": "# Deploys\n\nProduction deploys run every Tuesday at 22:00 UTC, after the "
    "staging canary has been green for two hours.\n",
    "refunds.md": "# Refunds\n\nCustomers are refunded within 30 days of a return; the payment "
    "provider takes up to five working days to show the money.\n",
    "tea.md": "# Tea\n\nSteep green tea at 80 degrees for two minutes; black tea wants 95 degrees "
    "and four minutes.\n",
    "lamp.md": "# Lamp\n\n## Replacing the bulb\n\nUnscrew the cover, then turn the old bulb "
    "anticlockwise.\n",
}


def write_corpus(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    return docs


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def built_index(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """An index over the corpus with the default embedder (a real model) and structural
    contexts; tests that write make a copy (:func:`index_copy`)."""
    path = tmp_path_factory.mktemp("index") / "idx"
    index = situate.Index(path, create=True)
    out = index.ingest(corpus)
    assert out.report.added == len(DOCS)
    return path


@pytest.fixture
def index(built_index: Path) -> situate.Index:
    """The shared index, read only."""
    return situate.Index(built_index)


@pytest.fixture
def index_copy(built_index: Path, tmp_path: Path) -> situate.Index:
    """A copy of the index to write to."""
    dst = tmp_path / "idx"
    shutil.copytree(built_index, dst)
    return situate.Index(dst)


@pytest.fixture
def small(tmp_path: Path) -> situate.Index:
    """A new index with the model-free hashing embedder, for tests of writes."""
    return situate.Index(tmp_path / "small", create=True, embedder="hash:64")


def situate_bin() -> str:
    b = os.environ.get("SITUATE_BIN")
    if not b:
        pytest.skip("SITUATE_BIN is not set: the client's tests need the situate binary")
    return b


@contextlib.contextmanager
def serving(index: Path, tmp_path: Path, settings: str = "") -> Iterator[str]:
    """`situate serve` on a copy of `index` (with `settings` as its situate.toml), on a free
    loopback port; its URL."""
    dst = tmp_path / "served"
    shutil.copytree(index, dst)
    toml = tmp_path / "situate.toml"
    toml.write_text(settings, encoding="utf-8")
    cmd = [situate_bin(), "--json", "serve", "--bind", "127.0.0.1:0", "--index", str(dst)]
    cmd += ["--evals", str(tmp_path / "evals"), "--backups", str(tmp_path / "backups"), "--settings", str(toml)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"situate serve did not start: {proc.stderr.read() if proc.stderr else ''}")
        yield "http://" + json.loads(line)["listening"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def service(built_index: Path, tmp_path: Path) -> Iterator[str]:
    """`situate serve` on a copy of the index; its URL."""
    with serving(built_index, tmp_path) as url:
        yield url
