"""situate: Contextual Retrieval in this process.

An LLM (situate's local one by default) writes a short note situating each chunk in its
document; the note is indexed with the chunk for BM25 and for the embedder, both are
searched, fused and reranked, and answers are built from the original chunks.

>>> import situate
>>> index = situate.Index("my-index", create=True)           # doctest: +SKIP
>>> index.ingest("docs/")                                      # doctest: +SKIP
>>> for hit in index.search("how do I rotate the keys?", k=5).hits:   # doctest: +SKIP
...     print(hit.rank, hit.document_id, hit.context, hit.original_text[:80])

``situate.Client(url, key)`` has the same methods over a running ``situate serve``.
Integrations: :mod:`situate.langchain`, :mod:`situate.llama_index`, :mod:`situate.haystack`.
"""

from __future__ import annotations

import platform as _platform


def _cpu_flags() -> "set[str]":
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _check_cpu(built_for: "list[str]") -> None:
    """A wheel is built for x86-64 with AVX2, FMA and F16C (``x86-64-v3``; a local build
    for its own CPU): say so plainly on a CPU without what the build assumed, instead of
    dying on an illegal instruction at the first search. Loading the module runs none of
    the engine's vector code, so asking it what it was built for is safe."""
    if _platform.machine().lower() not in ("x86_64", "amd64"):
        return
    flags = _cpu_flags()
    if not flags:
        return
    missing = sorted(f for f in built_for if f not in flags)
    if missing:
        raise ImportError(
            "this situate build needs a CPU with " + ", ".join(built_for)
            + "; this one lacks " + ", ".join(missing)
            + ". Build the package on this machine instead (pip install ./python)."
        )


from . import _situate  # noqa: E402

_check_cpu(_situate.build_features())
from .client import Client  # noqa: E402
from .errors import *  # noqa: E402,F403 - the exceptions are the package's
from .errors import __all__ as _errors  # noqa: E402
from .index import Index  # noqa: E402
from .types import *  # noqa: E402,F403 - the answer types are the package's
from .types import WIRE_TYPES as _WIRE_TYPES  # noqa: E402
from .types import __all__ as _types  # noqa: E402

_situate.register_types(_WIRE_TYPES)

__version__: str = _situate.__version__

__all__ = ["Client", "Index", *_errors, *_types]
