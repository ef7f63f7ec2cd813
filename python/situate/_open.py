"""What the integrations accept as an index: an ``Index``, a ``Client``, a path, or a
service's URL."""

from __future__ import annotations

import os
from os import PathLike
from typing import Any, Union

from .client import Client
from .index import Index

IndexLike = Union[Index, Client, str, "PathLike[str]"]


def open_index(index: Any) -> Union[Index, Client]:
    """``index`` as something to search: an ``Index`` or ``Client`` as it is; a URL
    (``http://…``) as a ``Client`` (its key from ``SITUATE_API_KEY``); a path as an
    ``Index``."""
    if isinstance(index, (Index, Client)):
        return index
    if isinstance(index, str) and index.startswith(("http://", "https://")):
        return Client(index, os.environ.get("SITUATE_API_KEY"))
    if isinstance(index, (str, PathLike)):
        return Index(index)
    raise TypeError(f"expected a situate.Index, a situate.Client, a path or a URL, not {type(index).__name__}")


def hit_metadata(hit: Any) -> dict:
    """A hit's fields as metadata: ids, where it lies, its context and scores."""
    return {
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "title": hit.title,
        "source": hit.source,
        "heading_path": list(hit.heading_path),
        "place": None if hit.place is None else {"unit": hit.place.unit, "first": hit.place.first, "last": hit.place.last},
        "context": hit.context,
        "context_status": hit.context_status,
        "rank": hit.rank,
        "score": hit.score,
        "legs": [{"leg": leg.leg, "rank": leg.rank, "score": leg.score} for leg in hit.legs],
    }
