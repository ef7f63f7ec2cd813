"""The methods an ``Index`` and a ``Client`` share, written once.

Each method builds the request body the HTTP API takes (the engine's request types, by
their wire names) and hands it to ``_call(op, body)``: an ``Index`` runs it on the engine in
this process, a ``Client`` sends it to a service. The answer comes back as the same JSON
either way and is read into the same dataclass (:mod:`situate.types`).
"""

from __future__ import annotations

import asyncio
import functools
from os import PathLike
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from .types import (
    Answer,
    Card,
    ContextItem,
    ContextPage,
    Decision,
    DocumentDetail,
    DocumentPage,
    EvalResult,
    Export,
    ImportResult,
    IngestResult,
    SearchResult,
    Status,
    from_wire,
)

PathArg = Union[str, "PathLike[str]"]
Filters = Mapping[str, Any]
Progress = Callable[[Dict[str, Any]], None]


def _filter_body(filters: Optional[Filters]) -> Optional[Dict[str, Any]]:
    """A search filter: ``documents``, ``paths`` (globs), ``languages``, ``kinds`` and
    ``meta`` (``{"team": "ops"}`` or ``["team=ops"]``)."""
    if not filters:
        return None
    out: Dict[str, Any] = {}
    for key, value in filters.items():
        if key == "meta" and isinstance(value, Mapping):
            value = [f"{k}={v}" for k, v in value.items()]
        elif isinstance(value, str):
            value = [value]
        out[key] = list(value)
    return out


def _texts_body(
    texts: Optional[Sequence[Union[str, Mapping[str, Any]]]],
    ids: Optional[Sequence[str]],
    metadatas: Optional[Sequence[Optional[Mapping[str, Any]]]],
) -> List[Dict[str, Any]]:
    """Texts as the engine takes them: ``{"id", "text", "title", "metadata", "kind"}``.
    Plain strings need ``ids`` (one each); ``metadatas`` go with them in order."""
    if not texts:
        return []
    if ids is not None and len(ids) != len(texts):
        raise _invalid("ids", f"{len(ids)} ids for {len(texts)} texts")
    if metadatas is not None and len(metadatas) != len(texts):
        raise _invalid("metadatas", f"{len(metadatas)} metadatas for {len(texts)} texts")
    out = []
    for i, t in enumerate(texts):
        if isinstance(t, str):
            if ids is None:
                raise _invalid("ids", "plain texts need ids (or pass dicts with an `id`)")
            item: Dict[str, Any] = {"id": str(ids[i]), "text": t}
        else:
            item = dict(t)
            if ids is not None:
                item["id"] = str(ids[i])
        if metadatas is not None and metadatas[i]:
            item["metadata"] = {**item.get("metadata", {}), **dict(metadatas[i] or {})}
        out.append(item)
    return out


def _invalid(field: str, detail: str) -> Exception:
    from .errors import InvalidRequest

    return InvalidRequest(detail, field=field, status=400)


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class _Contexts:
    """The review queue and the contexts of an index: ``list``, ``iter``, ``set``,
    ``export``, ``import_``."""

    def __init__(self, api: "_Api") -> None:
        self._api = api

    def list(
        self,
        status: Union[str, Sequence[str], None] = None,
        *,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> ContextPage:
        """A page of cards whose context has one of ``status`` (``pending``,
        ``generated``, ``verified``, ``rejected``, ``failed``, …; none: every status)."""
        statuses = [status] if isinstance(status, str) else list(status or [])
        body = _drop_none({"status": statuses, "limit": limit, "cursor": cursor})
        return from_wire(ContextPage, self._api._call("contexts", body))

    def iter(self, status: Union[str, Sequence[str], None] = None) -> Iterator[ContextItem]:
        """Every card of ``status``, page by page."""
        cursor = None
        while True:
            page = self.list(status, cursor=cursor)
            yield from page.contexts
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def set(self, chunk_id: str, decision: str, text: Optional[str] = None) -> Decision:
        """A person's decision on a context: ``accept``, ``reject`` (the chunk is indexed
        without it) or ``edit`` with ``text`` (provenance ``manual``)."""
        body = _drop_none({"chunk_id": chunk_id, "decision": decision, "text": text})
        return from_wire(Decision, self._api._call("decide", body))

    def export(self, file: PathArg) -> Export:
        """Writes every context to a JSONL file (``situate contexts export``): what an
        LLM wrote, kept apart from the index."""
        return from_wire(Export, self._api._call("export_contexts", {"file": str(file)}))

    def import_(self, file: PathArg) -> ImportResult:
        """Sets contexts from such a file: no LLM call for what was paid once."""
        return from_wire(ImportResult, self._api._call("import_contexts", {"file": str(file)}))


class _Api:
    """The operations of an index, whether in this process or behind a service."""

    def _call(self, op: str, body: Dict[str, Any], **hooks: Any) -> Any:
        raise NotImplementedError

    @property
    def contexts(self) -> _Contexts:
        """The contexts: ``list``, ``iter``, ``set``, ``export``, ``import_``."""
        return _Contexts(self)

    def search(
        self,
        query: str,
        k: Optional[int] = None,
        *,
        mode: Optional[str] = None,
        filters: Optional[Filters] = None,
        rerank: Optional[str] = None,
        **settings: Any,
    ) -> SearchResult:
        """Searches: BM25 and vectors over the contextualized chunks, fused, de-duplicated
        and (with ``rerank``) re-scored; the best ``k`` hits, each with the original and
        its context apart.

        ``mode``: ``hybrid`` (the default when the index has vectors), ``bm25`` or
        ``vector``. ``filters``: ``documents``, ``paths``, ``languages``, ``kinds``,
        ``meta``. ``rerank``: ``none``, ``cross-encoder``, ``llm``, a hosted reranker.
        Other ``[search]`` settings by their ``situate.toml`` names (``context_weight``,
        ``fusion`` (``rrf``, ``minmax``, ``tm2c2``, ``zscore``), ``alpha`` (the vector
        leg's share, 0 to 1), ``rrf_k``, ``rerank_depth``, …); unset, a hybrid search
        fuses as the index records for its embedder.
        """
        body = _drop_none(
            {"query": query, "k": k, "mode": mode, "rerank": rerank, **settings}
        )
        f = _filter_body(filters)
        if f:
            body["filter"] = f
        return from_wire(SearchResult, self._call("search", body))

    def ask(
        self,
        question: str,
        *,
        filters: Optional[Filters] = None,
        on_text: Optional[Callable[[str], None]] = None,
        **settings: Any,
    ) -> Answer:
        """A grounded answer from the original chunks, each claim cited, or an abstention
        when the documents do not hold the answer. ``[answer]`` settings by their names
        (``model``: the answer LLM, ``passages``, ``mode``: ``retrieval``/``full``/``auto``,
        ``max_tokens``, ``min_score``, …); ``search={…}`` for the retrieval's settings. ``on_text(str)`` receives the answer as the model writes it."""
        body = _drop_none({"question": question, **settings})
        f = _filter_body(filters)
        if f:
            body["filter"] = f
        return from_wire(Answer, self._call("ask", body, on_text=on_text))

    def card(self, chunk_id: str, *, neighbours: int = 0) -> Card:
        """A chunk card in full (original, context, status, provenance, document), with
        ``neighbours`` chunks on each side."""
        body = {"chunk_id": chunk_id, "neighbours": neighbours}
        return from_wire(Card, self._call("card", body))

    def document(self, document_id: str) -> DocumentDetail:
        """A stored document and its chunks' ids, in order."""
        return from_wire(DocumentDetail, self._call("document", {"document_id": document_id}))

    def documents(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> DocumentPage:
        """A page of documents in id order."""
        return from_wire(DocumentPage, self._call("documents", _drop_none({"limit": limit, "cursor": cursor})))

    def status(self) -> Status:
        """The index's state: counts of documents, chunks, contexts by status, vectors."""
        return from_wire(Status, self._call("status", {}))

    def ingest(
        self,
        paths: Union[PathArg, Sequence[PathArg], None] = None,
        *,
        texts: Optional[Sequence[Union[str, Mapping[str, Any]]]] = None,
        ids: Optional[Sequence[str]] = None,
        metadatas: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
        context: Optional[str] = None,
        llm: Optional[str] = None,
        budget: Optional[float] = None,
        meta: Optional[Mapping[str, str]] = None,
        progress: Optional[Progress] = None,
        **options: Any,
    ) -> IngestResult:
        """Ingests files and folders (``paths``: Markdown, text, HTML, PDF, Office,
        spreadsheets, code; BEIR and Anthropic corpora) and/or ``texts`` (strings with
        ``ids`` and ``metadatas``, or dicts ``{"id", "text", "title", "metadata",
        "kind"}``). Unchanged documents are left alone.

        ``context``: ``structural`` (the default), ``none``, ``llm``, ``document``,
        ``document+llm``. ``llm``: the model (situate's local one by default, or
        ``anthropic:…``, ``openai:…``); ``budget`` in dollars. ``meta``: metadata for
        every document. ``progress(event)`` receives each event as a dict (``event``:
        ``document``, ``skipped``, ``contextualized``, ``embedding``, ``committed``).
        Other options: ``format``, ``language``, ``max_tokens``, ``overlap``, ``batch``,
        ``dry_run``.
        """
        if paths is None:
            path_list: List[str] = []
        elif isinstance(paths, (str, PathLike)):
            path_list = [str(paths)]
        else:
            path_list = [str(p) for p in paths]
        body = _drop_none(
            {
                "paths": path_list,
                "texts": _texts_body(texts, ids, metadatas),
                "context": context,
                "llm": llm,
                "budget": budget,
                "meta": [f"{k}={v}" for k, v in (meta or {}).items()],
                **options,
            }
        )
        answer = self._call("ingest", body, progress=progress)
        if answer.get("dry_run"):
            return answer  # type: ignore[no-any-return]
        return from_wire(IngestResult, answer)

    def remove(self, document_id: str) -> None:
        """Removes a document and its chunks from the store and every index."""
        self._call("remove", {"document_id": document_id})

    def eval(self, dataset: PathArg, *, name: str = "eval", **options: Any) -> EvalResult:
        """Evaluates retrieval on a set (a BEIR folder, Anthropic's folder, or a
        ``.jsonl`` of questions asked of this index): Recall, Pass@k, MRR, nDCG per
        configuration. Options by name: ``configs`` (``["bm25+none",
        "hybrid+structural", …]``, the first is the baseline), ``queries``, ``split``,
        ``matching``, ``max_tokens``, ``overlap``, ``embedder``, ``rerank_depth``."""
        body = _drop_none({"dataset": str(dataset), "name": name, **options})
        return EvalResult.from_wire(self._call("eval", body))

    def reembed(self, embedder: str, *, batch: Optional[int] = None) -> Dict[str, Any]:
        """Moves the index to another embedder while it serves (``situate reembed``): every
        chunk embedded by ``embedder`` beside the live vectors (no LLM call; embeddings
        cached for that model reused), then one atomic switch. Searches answer from the
        old vectors until then; a run stopped midway resumes where it was. Answers
        ``previous``, ``embedder``, ``vectors``, ``embedded``, ``reused``, ``switched``."""
        return self._call("reembed", _drop_none({"embedder": embedder, "batch": batch}))  # type: ignore[no-any-return]

    def tune(
        self,
        questions: PathArg,
        *,
        controls: Optional[PathArg] = None,
        queries: Optional[int] = None,
        test_rest: bool = False,
        folds: Optional[int] = None,
        metric: Optional[str] = None,
        grid: Optional[Dict[str, Any]] = None,
        write: Optional[PathArg] = None,
        **options: Any,
    ) -> Dict[str, Any]:
        """Chooses the search settings on your own questions (``situate tune``): a grid of
        fusion × α × RRF k × context weight × fetch depth (``grid``: ``fusions``,
        ``alphas``, ``rrf_ks``, ``context_weights``, ``fetches``), scored by ``folds``-fold
        cross-validation on ``metric`` (``ndcg@10``). ``questions``: a question file of
        ``situate eval-set``, a BEIR folder or Anthropic's folder; ``controls``: questions
        the documents cannot answer, for ``[answer] min_score``. The answer's ``decision``
        is ``change`` only when the gain holds on questions it was not chosen on;
        ``settings`` is what to set. ``write`` (an ``Index`` only): a settings file the
        choice is written into when it is a change."""
        body = _drop_none(
            {
                "questions": str(questions),
                "controls": None if controls is None else str(controls),
                "queries": queries,
                "test_rest": test_rest or None,
                "folds": folds,
                "metric": metric,
                "grid": grid,
                **options,
            }
        )
        if write is not None:
            body["write"] = write
        return self._call("tune", body)  # type: ignore[no-any-return]

    # Async variants: the same calls on a worker thread (the engine releases the GIL, so
    # the event loop and other threads run meanwhile).

    async def _in_thread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(f, *args, **kwargs))

    async def asearch(self, query: str, k: Optional[int] = None, **kwargs: Any) -> SearchResult:
        """:meth:`search` without blocking the event loop."""
        return await self._in_thread(self.search, query, k, **kwargs)  # type: ignore[no-any-return]

    async def aask(self, question: str, **kwargs: Any) -> Answer:
        """:meth:`ask` without blocking the event loop."""
        return await self._in_thread(self.ask, question, **kwargs)  # type: ignore[no-any-return]

    async def acard(self, chunk_id: str, *, neighbours: int = 0) -> Card:
        """:meth:`card` without blocking the event loop."""
        return await self._in_thread(self.card, chunk_id, neighbours=neighbours)  # type: ignore[no-any-return]

    async def astatus(self) -> Status:
        """:meth:`status` without blocking the event loop."""
        return await self._in_thread(self.status)  # type: ignore[no-any-return]

    async def aingest(self, paths: Any = None, **kwargs: Any) -> IngestResult:
        """:meth:`ingest` without blocking the event loop."""
        return await self._in_thread(self.ingest, paths, **kwargs)  # type: ignore[no-any-return]

    async def aeval(self, dataset: PathArg, **kwargs: Any) -> EvalResult:
        """:meth:`eval` without blocking the event loop."""
        return await self._in_thread(self.eval, dataset, **kwargs)  # type: ignore[no-any-return]

