"""LangChain integration (``pip install 'situate[langchain]'``, on ``langchain-core``).

- :class:`SituateRetriever`: situate's hybrid search (contextual BM25 + vectors, fused,
  reranked) as a ``BaseRetriever``. In place of the recipe's vector store +
  ``BM25Retriever`` + ``EnsembleRetriever``: one retriever, one index.
- :class:`SituateContextualizer`: a document transformer that splits documents and writes
  each chunk's context (situate's local LLM by default, or a hosted one), for those who
  keep their own vector store: each chunk's ``page_content`` is the context before the
  original, and both are kept apart in its metadata.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from ._open import hit_metadata, open_index
from .contextualize import Contextualizer

__all__ = ["SituateContextualizer", "SituateRetriever"]


class SituateRetriever(BaseRetriever):
    """situate's search as a LangChain retriever.

    ``index``: a ``situate.Index``, a ``situate.Client``, an index path or a service URL.
    ``k``: how many documents (``invoke(query, k=…)`` overrides it). ``mode``, ``filters``,
    ``rerank`` and ``settings`` as for ``Index.search``.

    Each ``Document``'s ``page_content`` is the original chunk; its metadata carries the
    context, the chunk and document ids, the title and source, the place (pages), the
    final score and rank, and each leg's rank and score (``legs``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any
    k: int = 20
    mode: Optional[str] = None
    filters: Optional[Dict[str, Any]] = None
    rerank: Optional[str] = None
    settings: Dict[str, Any] = {}
    _searcher: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        self._searcher = open_index(self.index)

    def _search(self, query: str, k: Optional[int]) -> List[Document]:
        result = self._searcher.search(
            query,
            k if k is not None else self.k,
            mode=self.mode,
            filters=self.filters,
            rerank=self.rerank,
            **self.settings,
        )
        return [Document(page_content=h.original_text, metadata=hit_metadata(h), id=h.chunk_id) for h in result.hits]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: Optional[int] = None, **_: Any
    ) -> List[Document]:
        return self._search(query, k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: Optional[int] = None, **_: Any
    ) -> List[Document]:
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._search, query, k)


class SituateContextualizer(BaseDocumentTransformer):
    """Splits documents with situate's chunker and writes each chunk's context.

    Returns one ``Document`` per chunk: ``page_content`` is the context, a blank line and
    the original chunk (what Contextual Retrieval embeds and indexes); the metadata is the
    source document's, plus ``context``, ``original``, ``chunk_id``, ``document_id`` and
    ``context_status``. A document's id is its metadata's ``id``, else its ``source``,
    else its position.

    The options are :class:`situate.contextualize.Contextualizer`'s (``context="llm"``,
    ``llm``, ``budget``, ``path``, ``max_tokens``, ``overlap``); contexts are kept, so
    transforming the same documents again costs no model call.
    """

    def __init__(self, contextualizer: Optional[Contextualizer] = None, **options: Any) -> None:
        self.contextualizer = contextualizer or Contextualizer(**options)

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        ids = _document_ids(documents)
        given = [
            {"id": i, "text": d.page_content, "title": d.metadata.get("title"), "metadata": _scalars(d.metadata)}
            for i, d in zip(ids, documents)
        ]
        out: List[Document] = []
        for doc, chunks in zip(documents, self.contextualizer.run(given)):
            for c in chunks:
                meta = {
                    **doc.metadata,
                    "context": c.context,
                    "original": c.original,
                    "chunk_id": c.chunk_id,
                    "document_id": c.document_id,
                    "context_status": c.context_status,
                }
                out.append(Document(page_content=c.text, metadata=meta, id=c.chunk_id))
        return out

    async def atransform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.transform_documents, documents)


def _document_ids(documents: Sequence[Document]) -> List[str]:
    ids: List[str] = []
    seen: Dict[str, int] = {}
    for n, d in enumerate(documents):
        base = str(d.metadata.get("id") or d.metadata.get("source") or d.id or f"document-{n}")
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.append(base if count == 0 else f"{base}~{count}")
    return ids


def _scalars(metadata: Dict[str, Any]) -> Dict[str, Any]:
    """The metadata situate keeps (and filters on): strings, numbers and booleans."""
    return {k: v for k, v in metadata.items() if isinstance(v, (str, int, float, bool))}
