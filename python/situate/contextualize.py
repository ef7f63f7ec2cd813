"""Contexts for your own pipeline: situate's chunker and contextualizer, without its
search.

The LangChain transformer and the LlamaIndex extractor call this. The documents go into a
working index that holds no vectors (``embedder="none"``), where situate's ingest writes
each chunk's context (its local LLM by default, or a hosted one) and keeps it: a document
given again unchanged costs no model call, and a changed one reuses the context cache for
what it can. The contexts are then read back from the chunk cards, the original and the
context apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from os import PathLike, fspath
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .index import Index
from .types import IngestResult

__all__ = ["ContextualizedChunk", "Contextualizer", "default_path"]


def default_path() -> Path:
    """Where contexts are kept when no path is given: ``$XDG_CACHE_HOME/situate/contexts``
    (``~/.cache/situate/contexts``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "situate" / "contexts"


@dataclass(frozen=True)
class ContextualizedChunk:
    """A chunk of a document and the context written for it."""

    document_id: str
    chunk_id: str
    ordinal: int
    original: str
    #: The context, when one was written and passed situate's checks (else ``None``).
    context: Optional[str]
    context_status: str

    @property
    def text(self) -> str:
        """The context before the original, as situate indexes them."""
        return f"{self.context}\n\n{self.original}" if self.context else self.original


class Contextualizer:
    """Writes a context for every chunk of the documents it is given.

    ``context``: ``llm`` (a note per chunk by an LLM that reads the whole document; the
    default), ``document+llm`` (a description of the document, the structural context and
    the note), ``document``, ``structural`` (title and headings, no model). ``llm``: the
    model (situate's local one when not given; ``anthropic:…``, ``openai:…`` for hosted
    ones, with their keys in the environment), ``budget`` in dollars. ``path``: where the
    contexts are kept (default :func:`default_path`). ``max_tokens`` and ``overlap``: how
    situate's chunker cuts documents whose chunks are not given.
    """

    def __init__(
        self,
        path: Optional[Union[str, "PathLike[str]"]] = None,
        *,
        context: str = "llm",
        llm: Optional[str] = None,
        budget: Optional[float] = None,
        max_tokens: Optional[int] = None,
        overlap: Optional[int] = None,
    ) -> None:
        self.path = Path(fspath(path)) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.context = context
        self.llm = llm
        self.budget = budget
        self.max_tokens = max_tokens
        self.overlap = overlap
        self._index: Optional[Index] = None
        #: The last run's ingest report (what was written, cached, skipped).
        self.last_run: Optional[IngestResult] = None

    @property
    def index(self) -> Index:
        """The working index (made on first use)."""
        if self._index is None:
            self._index = Index(self.path, create=True, embedder="none")
        return self._index

    def run(self, documents: Sequence[Mapping[str, Any]]) -> List[List[ContextualizedChunk]]:
        """Contexts for ``documents`` (dicts ``{"id", "text", "title", "metadata",
        "chunks"}``; ``chunks`` when the caller cut them: pieces of the text, in order),
        one list of chunks per document, in order. A document situate could not read
        (an empty text, chunks not in it) gets an empty list."""
        if not documents:
            return []
        texts = [{k: v for k, v in d.items() if v is not None} for d in documents]
        options: Dict[str, Any] = {"max_tokens": self.max_tokens, "overlap": self.overlap}
        self.last_run = self.index.ingest(
            texts=texts,
            context=self.context,
            llm=self.llm,
            budget=self.budget,
            **{k: v for k, v in options.items() if v is not None},
        )
        skipped = {s.get("source") for s in self.last_run.report.skipped}
        out: List[List[ContextualizedChunk]] = []
        for d in documents:
            doc_id = str(d["id"])
            if doc_id in skipped:
                out.append([])
                continue
            chunks = []
            for ordinal, chunk_id in enumerate(self.index.document(doc_id).chunk_ids):
                card = self.index.card(chunk_id)
                indexed = card.indexed_text != card.original_text
                chunks.append(
                    ContextualizedChunk(
                        document_id=doc_id,
                        chunk_id=chunk_id,
                        ordinal=ordinal,
                        original=card.original_text,
                        context=card.generated_context if indexed else None,
                        context_status=card.context_status,
                    )
                )
            out.append(chunks)
        return out
