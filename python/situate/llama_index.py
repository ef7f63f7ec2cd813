"""LlamaIndex integration (``pip install 'situate[llama-index]'``, on ``llama-index-core``).

- :class:`SituateRetriever`: situate's hybrid search as a ``BaseRetriever`` returning
  ``NodeWithScore``s (usable in a ``RetrieverQueryEngine``).
- :class:`SituateContextExtractor`: an extractor for an ``IngestionPipeline``, where
  ``DocumentContextExtractor`` goes: it writes each node's context into its metadata with
  situate's contextualizer (its local LLM by default), reading the whole document; the
  contexts are kept, so running the pipeline again costs no model call.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.extractors.interface import BaseExtractor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr

from ._open import hit_metadata, open_index
from .contextualize import Contextualizer

__all__ = ["SituateContextExtractor", "SituateRetriever"]

# Metadata a node carries for the application, kept out of what the LLM and the embedder
# read (the context and the title stay in).
_NOT_FOR_MODELS = ["chunk_id", "document_id", "source", "heading_path", "place", "context_status", "rank", "score", "legs"]


class SituateRetriever(BaseRetriever):
    """situate's search as a LlamaIndex retriever.

    ``index``: a ``situate.Index``, a ``situate.Client``, an index path or a service URL.
    ``similarity_top_k``: how many nodes. ``mode``, ``filters``, ``rerank`` and
    ``settings`` as for ``Index.search``. Each node's text is the original chunk, its id
    the chunk id, its score the final score; its metadata carries the context, the ids and
    each leg's rank and score.
    """

    def __init__(
        self,
        index: Any,
        similarity_top_k: int = 20,
        *,
        mode: Optional[str] = None,
        filters: Optional[Dict[str, Any]] = None,
        rerank: Optional[str] = None,
        settings: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._index = open_index(index)
        self.similarity_top_k = similarity_top_k
        self.mode = mode
        self.filters = filters
        self.rerank = rerank
        self.settings = dict(settings or {})

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        result = self._index.search(
            query_bundle.query_str,
            self.similarity_top_k,
            mode=self.mode,
            filters=self.filters,
            rerank=self.rerank,
            **self.settings,
        )
        nodes = []
        for h in result.hits:
            node = TextNode(
                id_=h.chunk_id,
                text=h.original_text,
                metadata=hit_metadata(h),
                excluded_llm_metadata_keys=list(_NOT_FOR_MODELS),
                excluded_embed_metadata_keys=list(_NOT_FOR_MODELS),
            )
            nodes.append(NodeWithScore(node=node, score=float(h.score)))
        return nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._retrieve, query_bundle)


class SituateContextExtractor(BaseExtractor):
    """Writes each node's situating context into its metadata (under ``key``).

    Nodes are grouped by their source document (``ref_doc_id``). The document situate's
    LLM reads is the one in ``docstore`` when given (as ``DocumentContextExtractor`` takes
    it), else the group's texts joined; each node's text must be a piece of it. A node
    whose document could not be read gets no context (an empty dict).

    The options are :class:`situate.contextualize.Contextualizer`'s (``context="llm"``,
    ``llm``, ``budget``, ``path``).
    """

    key: str = Field(default="context", description="The metadata key the context goes under.")
    docstore: Any = Field(default=None, description="Where the nodes' documents are, if anywhere.")
    options: Dict[str, Any] = Field(default_factory=dict, description="The Contextualizer's options.")
    _contextualizer: Any = PrivateAttr(default=None)

    def __init__(self, contextualizer: Optional[Contextualizer] = None, **kwargs: Any) -> None:
        fields = {k: kwargs.pop(k) for k in ("key", "docstore", "show_progress", "in_place") if k in kwargs}
        super().__init__(options=dict(kwargs), **fields)  # type: ignore[call-arg]  # pydantic fields
        self._contextualizer = contextualizer or Contextualizer(**kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "SituateContextExtractor"

    def _document_text(self, doc_id: str, nodes: List[BaseNode]) -> str:
        if self.docstore is not None:
            doc = self.docstore.get_document(doc_id, raise_error=False)
            if doc is not None:
                return str(doc.get_content())
        return "\n\n".join(n.get_content() for n in nodes)

    def _extract(self, nodes: Sequence[BaseNode]) -> List[Dict]:
        groups: Dict[str, List[int]] = {}
        for i, n in enumerate(nodes):
            groups.setdefault(n.ref_doc_id or n.node_id, []).append(i)
        documents = []
        for doc_id, members in groups.items():
            group = [nodes[i] for i in members]
            documents.append(
                {"id": doc_id, "text": self._document_text(doc_id, group), "chunks": [n.get_content() for n in group]}
            )
        out: List[Dict] = [{} for _ in nodes]
        for (doc_id, members), chunks in zip(groups.items(), self._contextualizer.run(documents)):
            for i, c in zip(members, chunks):
                if c.context:
                    out[i] = {self.key: c.context}
        return out

    async def aextract(self, nodes: Sequence[BaseNode]) -> List[Dict]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._extract, list(nodes))
