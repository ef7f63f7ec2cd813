"""situate's exceptions: one class per error kind, the same from an ``Index`` and a
``Client``.

Every error the engine gives has a kind (what a caller can do about it) with a stable code,
the HTTP status the service answers it with, and, for an invalid request, the name of the
field at fault. The classes follow the kinds; :func:`from_problem` builds one from those
fields, whether they came from the engine in this process or from a service's
``application/problem+json`` body.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "Busy",
    "Conflict",
    "Damaged",
    "InternalError",
    "InvalidRequest",
    "ModelMissing",
    "NotFound",
    "SituateError",
    "Unavailable",
    "UpstreamFailed",
    "from_problem",
]


class SituateError(Exception):
    """Any error situate reports.

    Attributes: ``code`` (``invalid-request``, ``not-found``, …), ``status`` (the HTTP
    status the service answers with), ``detail`` (the message), ``field`` (the request
    field at fault, by its wire name, or ``None``), ``install`` (for a missing model: the
    command that installs it).
    """

    code = "internal"

    def __init__(
        self,
        detail: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        field: Optional[str] = None,
        install: Optional[str] = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.status = status
        self.field = field
        self.install = install

    def __str__(self) -> str:
        s = self.detail
        if self.install and self.install not in s:
            s += f" (install it with `{self.install}`)"
        return s


class InvalidRequest(SituateError, ValueError):
    """The request is wrong: a field out of range, an unknown name, a bad file."""

    code = "invalid-request"


class NotFound(SituateError, LookupError):
    """No such chunk, document, job or index."""

    code = "not-found"


class Conflict(SituateError):
    """The request contradicts what is there (an index that already exists)."""

    code = "conflict"


class Busy(SituateError):
    """Another process is writing the index; try again when it is done."""

    code = "locked"


class Unavailable(SituateError):
    """The index (or the store, or the service) cannot answer now: none at the path, or
    not ready."""

    code = "unavailable"


class UpstreamFailed(SituateError):
    """A model or a hosted service failed."""

    code = "upstream-failed"


class ModelMissing(SituateError):
    """A local model is not installed; ``install`` is the command that installs it."""

    code = "model-missing"


class InternalError(SituateError):
    """A fault in situate or its files, not in the request."""

    code = "internal"


class Damaged(SituateError):
    """A file of the index is damaged; the message names it and what to run
    (``situate rebuild`` for a derived index, a restore for the card store)."""

    code = "damaged"


_BY_CODE: Dict[str, Type[SituateError]] = {
    c.code: c
    for c in (
        InvalidRequest,
        NotFound,
        Conflict,
        Busy,
        Unavailable,
        UpstreamFailed,
        ModelMissing,
        InternalError,
        Damaged,
    )
}


def from_problem(problem: Dict[str, Any]) -> SituateError:
    """The exception for a problem's fields (``code``, ``detail``, ``status``, ``field``,
    ``install``); a code this version does not know gives a :class:`SituateError`."""
    code = str(problem.get("code") or "internal")
    cls = _BY_CODE.get(code, SituateError)
    detail = problem.get("detail") or problem.get("title") or code
    return cls(
        str(detail),
        code=code,
        status=problem.get("status"),
        field=problem.get("field"),
        install=problem.get("install"),
    )
