"""The answers situate gives, as dataclasses.

Each class mirrors one of the engine's wire types (the JSON the HTTP service sends and
``situate … --json`` prints) field for field, under the same names; ``tests/test_types.py``
checks every class against the engine's own schema, so the two cannot drift. An ``Index``
gets them made by the native module (``WIRE_TYPES``), a ``Client`` builds them from the
service's JSON (:func:`from_wire`): the same classes either way. Nested records a caller rarely
reads field by field (a card's provenance, the index's counts, token usage) stay plain
``dict``s.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Type, TypeVar, Union, overload

T = TypeVar("T")

__all__ = [
    "Answer",
    "Card",
    "Citation",
    "ContextItem",
    "ContextPage",
    "Decision",
    "Document",
    "DocumentDetail",
    "DocumentPage",
    "EvalResult",
    "Export",
    "Hit",
    "ImportResult",
    "IngestReport",
    "IngestResult",
    "LegScore",
    "Passage",
    "Place",
    "SearchResult",
    "Status",
]


@dataclass(frozen=True)
class Place:
    """Where a chunk lies in a paged document: pages or slides ``first`` to ``last``."""

    unit: str
    first: int
    last: int


@dataclass(frozen=True)
class LegScore:
    """One leg's rank and score for a hit (``bm25``, ``vector``, ``reranker``)."""

    leg: str
    rank: int
    score: float
    normalized: Optional[float] = None
    """The leg's value as the fusion used it (``1/(k+rank)`` under RRF, the score scaled
    to [0, 1] under ``minmax``, ``tm2c2`` and ``zscore``); ``None`` outside a fused search."""


@dataclass(frozen=True)
class Hit:
    """A search hit: the original chunk and its context apart, with each leg's rank and
    score, the chunk and document ids and where it lies."""

    rank: int
    score: float
    document_id: str
    chunk_id: str
    source: str
    char_start: int
    char_end: int
    heading_path: List[str]
    kind: str
    context_status: str
    original_text: str
    legs: List[LegScore]
    title: Optional[str] = None
    place: Optional[Place] = None
    context: Optional[str] = None


@dataclass(frozen=True)
class SearchResult(Sequence[Hit]):
    """What a search found and how: the hits, best first. It is also the sequence of its
    hits: ``for hit in index.search(q)``, ``index.search(q)[0]``, ``len(…)``."""

    query: str
    mode: str
    bm25: str
    took_ms: float
    hits: List[Hit]
    reranker: Optional[str] = None
    fusion: Optional[Dict[str, Any]] = None
    """How a hybrid search fused its legs: ``fusion``, ``rrf_k``, ``bm25_weight``,
    ``vector_weight`` and ``from`` (``index``: the index's choice for its embedder, or
    ``settings``)."""

    @overload
    def __getitem__(self, i: int) -> Hit: ...
    @overload
    def __getitem__(self, i: slice) -> List[Hit]: ...
    def __getitem__(self, i: Union[int, slice]) -> Union[Hit, List[Hit]]:
        return self.hits[i]

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)


@dataclass(frozen=True)
class Document:
    """A stored document."""

    id: str
    source: str
    language: str
    kind: str
    content_hash: str
    chunk_count: int
    char_count: int
    ingested_at: str
    metadata: Dict[str, Any]
    title: Optional[str] = None


@dataclass(frozen=True)
class Card:
    """A chunk card in full: the original, its context with status and provenance, the
    document, and the neighbouring chunks when asked for."""

    document_id: str
    chunk_id: str
    ordinal: int
    char_start: int
    char_end: int
    heading_path: List[str]
    kind: str
    original_text: str
    indexed_text: str
    context_status: str
    context_notes: List[str]
    document: Document
    generated_context: Optional[str] = None
    context_provenance: Optional[Dict[str, Any]] = None
    place: Optional[Place] = None
    neighbours: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class ContextItem:
    """A card in the review queue."""

    chunk_id: str
    document_id: str
    ordinal: int
    heading_path: List[str]
    original_text: str
    context_status: str
    context_notes: List[str]
    title: Optional[str] = None
    generated_context: Optional[str] = None
    context_provenance: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class ContextPage:
    """A page of the review queue; pass ``next_cursor`` back for the next one."""

    contexts: List[ContextItem]
    next_cursor: Optional[str] = None


@dataclass(frozen=True)
class DocumentDetail:
    """A document and its chunks' ids, in order."""

    document: Document
    chunk_ids: List[str]


@dataclass(frozen=True)
class DocumentPage:
    """A page of documents in id order; pass ``next_cursor`` back for the next one."""

    documents: List[Document]
    next_cursor: Optional[str] = None


@dataclass(frozen=True)
class Status:
    """The index's state: its directory, the default search mode, its counts, and the
    vector instructions this process's kernels use (``cpu``: ``level``, ``forced``,
    ``runs``)."""

    index: str
    default_mode: str
    stats: Dict[str, Any]
    cpu: Dict[str, Any]


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk given to the answer model, numbered as it may cite it."""

    id: int
    chunk_id: str
    document_id: str
    original: str
    score: float
    title: Optional[str] = None
    context: Optional[str] = None
    place: Optional[Place] = None


@dataclass(frozen=True)
class Citation:
    """A citation in an answer and whether it holds."""

    cited: str
    valid: bool
    passage: Optional[int] = None
    chunk_id: Optional[str] = None
    document_id: Optional[str] = None
    quote: Optional[str] = None
    problem: Optional[str] = None
    place: Optional[Place] = None


@dataclass(frozen=True)
class Answer:
    """A grounded answer built from the original chunks, or an abstention when the
    documents do not hold one."""

    question: str
    language: str
    answer: str
    abstained: bool
    grounded: bool
    problems: List[str]
    citations: List[Citation]
    passages: List[Passage]
    mode: str
    model: str
    prompt_version: str
    attempts: int
    usage: Dict[str, Any]
    took_ms: float
    abstention: Optional[Dict[str, Any]] = None
    cost: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class IngestReport:
    """An ingest's counts."""

    added: int
    replaced: int
    unchanged: int
    chunks: int
    context_failures: int
    contexts_rejected: int
    contexts_cached: int
    contexts_deferred: int
    document_tokens: int
    skipped: List[Dict[str, str]]
    usage: Dict[str, int]
    embedded: int
    embedding_failures: int
    embed_cut: Dict[str, Any]
    cancelled: bool
    embedding_error: Optional[str] = None
    embed_model: Optional[str] = None


@dataclass(frozen=True)
class IngestResult:
    """What an ingest did: the counts, the context method, time and cost."""

    index: str
    created: bool
    context: str
    chunk_tokens: int
    report: IngestReport
    seconds: float
    dollars: Optional[float] = None


@dataclass(frozen=True)
class Decision:
    """A context after a person's decision."""

    chunk_id: str
    context_status: str


@dataclass(frozen=True)
class Export:
    """Contexts written to a file."""

    exported: int
    file: str


@dataclass(frozen=True)
class ImportResult:
    """Contexts set from a file, and the lines skipped with why."""

    imported: int
    skipped: List[str]


@dataclass(frozen=True)
class EvalResult:
    """An evaluation: its report's name, its notes and the report itself (``report.json``:
    each configuration's metrics)."""

    id: str
    notes: List[str]
    report: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, data: Dict[str, Any]) -> "EvalResult":
        rest = {k: v for k, v in data.items() if k not in ("id", "notes")}
        return cls(id=data["id"], notes=list(data.get("notes", [])), report=rest)


#: The classes the native module makes directly, by their wire type's name (the engine's
#: Rust type): an ``Index``'s answers come as these objects, with no JSON between; the
#: others come as dicts, read by :func:`from_wire` as a ``Client``'s are.
WIRE_TYPES: Dict[str, type] = {
    "SearchResponse": SearchResult,
    "Hit": Hit,
    "LegScore": LegScore,
    "Place": Place,
    "StoredDocument": Document,
    "DocumentDetail": DocumentDetail,
    "DocumentPage": DocumentPage,
    "ContextPage": ContextPage,
    "ContextItem": ContextItem,
    "StatusAnswer": Status,
    "AnswerResponse": Answer,
    "Citation": Citation,
    "Passage": Passage,
    "DecisionAnswer": Decision,
    "ExportAnswer": Export,
    "ImportReport": ImportResult,
}


def from_wire(cls: Type[T], data: Any) -> T:
    """``cls`` from its wire JSON (a dict): nested records become their classes; a field
    the class does not know (from a newer service) is left out. An object the native module
    made as ``cls`` already is returned as it is."""
    if isinstance(data, cls):
        return data
    custom = getattr(cls, "from_wire", None)
    if custom is not None:
        return custom(data)  # type: ignore[no-any-return]
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    return _builder(cls)(data)  # type: ignore[no-any-return]


# Each class's builder is made once from its type hints (a search answer builds a hundred
# records; reading the hints for each took most of the package's time per search).
_BUILDERS: Dict[type, Callable[[Dict[str, Any]], Any]] = {}


def _builder(cls: type) -> Callable[[Dict[str, Any]], Any]:
    b = _BUILDERS.get(cls)
    if b is not None:
        return b
    hints = typing.get_type_hints(cls, vars(sys.modules[__name__]))
    fields = [(f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    plain = [name for name, conv in fields if conv is None]
    nested = [(name, conv) for name, conv in fields if conv is not None]

    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # type: ignore[arg-type,misc]
    new = object.__new__

    def build(data: Dict[str, Any]) -> Any:
        missing = [name for name in required if name not in data]
        if missing:
            raise TypeError(f"{cls.__name__}: the answer lacks {', '.join(missing)}")
        # Set as the frozen dataclass's __init__ would, without its per-field
        # object.__setattr__ (a third of a search's time in the package); a field the answer
        # leaves out keeps the class's default.
        obj: Any = new(cls)
        d = obj.__dict__
        for name in plain:
            if name in data:
                d[name] = data[name]
        for name, conv in nested:
            if name in data:
                v = data[name]
                d[name] = None if v is None else conv(v)
        return obj

    _BUILDERS[cls] = build
    return build


def _converter(tp: Any) -> Optional[Callable[[Any], Any]]:
    """How a field's JSON value becomes its Python value; ``None``: as it is."""
    origin = typing.get_origin(tp)
    if origin is Union:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _converter(inner[0]) if len(inner) == 1 else None
    if origin in (list, List):
        args = typing.get_args(tp)
        item = _converter(args[0]) if args else None
        if item is None:
            return None
        return lambda v: [item(x) for x in v]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return lambda v: from_wire(tp, v)
    return None
