"""Haystack integration (``pip install 'situate[haystack]'``, on ``haystack-ai``):
:class:`SituateRetriever`, a component that answers a query with situate's hybrid search.
"""

from __future__ import annotations

from os import fspath
from typing import Any, Dict, List, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ._open import hit_metadata, open_index
from .client import Client

__all__ = ["SituateRetriever"]


@component
class SituateRetriever:
    """situate's search as a Haystack component: ``query`` in, ``documents`` out.

    ``index``: a ``situate.Index``, a ``situate.Client``, an index path or a service URL.
    ``top_k``, ``mode``, ``filters`` (situate's: ``documents``, ``paths``, ``languages``,
    ``kinds``, ``meta``) and ``rerank`` as for ``Index.search``. Each ``Document``'s
    ``content`` is the original chunk, its ``id`` the chunk id, its ``score`` the final
    score; its ``meta`` carries the context, the ids and each leg's rank and score.
    """

    def __init__(
        self,
        index: Any,
        top_k: int = 10,
        mode: Optional[str] = None,
        filters: Optional[Dict[str, Any]] = None,
        rerank: Optional[str] = None,
    ) -> None:
        self._index = open_index(index)
        self.top_k = top_k
        self.mode = mode
        self.filters = filters
        self.rerank = rerank

    def to_dict(self) -> Dict[str, Any]:
        """The component's settings (an index by its path or URL)."""
        where = self._index.url if isinstance(self._index, Client) else fspath(self._index.path)
        return default_to_dict(
            self, index=where, top_k=self.top_k, mode=self.mode, filters=self.filters, rerank=self.rerank
        )

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SituateRetriever":
        return default_from_dict(cls, data)  # type: ignore[no-any-return]

    @component.output_types(documents=List[Document])
    def run(
        self, query: str, top_k: Optional[int] = None, filters: Optional[Dict[str, Any]] = None
    ) -> Dict[str, List[Document]]:
        """The best ``top_k`` chunks for ``query``."""
        result = self._index.search(
            query,
            top_k if top_k is not None else self.top_k,
            mode=self.mode,
            filters=filters if filters is not None else self.filters,
            rerank=self.rerank,
        )
        docs = [
            Document(id=h.chunk_id, content=h.original_text, meta=hit_metadata(h), score=float(h.score))
            for h in result.hits
        ]
        return {"documents": docs}

