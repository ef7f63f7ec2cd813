"""``situate.Index``: an index directory, in this process (no server)."""

from __future__ import annotations

import json
from os import PathLike, fspath
from pathlib import Path
from typing import Any, Dict, Optional, Union

from . import _situate
from ._api import _Api


class Index(_Api):
    """An index directory, searched and written in this process.

    ``Index(path)`` opens an index; ``Index(path, create=True)`` creates it first when there
    is none, with ``embedder`` (``auto``: MiniLM for English, multilingual-e5 otherwise;
    ``none``: BM25 only; a model name) and ``vector_index`` (``auto``, ``exact``,
    ``hnsw``). ``config`` is a ``situate.toml`` whose settings apply (none: the defaults).
    ``reports`` is where :meth:`eval` writes its reports (default: ``PATH.evals`` beside
    the index).

    Every call releases the GIL while the engine works; searches from several threads run
    at once, each on an engine of its own. Writes (``ingest``, ``contexts.set``,
    ``remove``) take the index's write lock for the call; a second writer gets
    :class:`situate.Busy`.
    """

    def __init__(
        self,
        path: Union[str, "PathLike[str]"],
        *,
        create: bool = False,
        embedder: Optional[str] = None,
        vector_index: Optional[str] = None,
        config: Optional[Union[str, "PathLike[str]"]] = None,
        reports: Optional[Union[str, "PathLike[str]"]] = None,
    ) -> None:
        self._native = _situate.NativeIndex(
            fspath(path),
            create=create,
            embedder=embedder,
            vector_index=vector_index,
            config=None if config is None else fspath(config),
        )
        p = Path(fspath(path))
        self._reports = Path(fspath(reports)) if reports is not None else p.with_name(p.name + ".evals")

    @property
    def path(self) -> Path:
        """The index directory."""
        return Path(self._native.path)

    def __repr__(self) -> str:
        return f"situate.Index({str(self.path)!r})"

    def _call(self, op: str, body: Dict[str, Any], **hooks: Any) -> Any:
        n = self._native
        if op in ("search", "card", "documents", "contexts"):
            out = getattr(n, op)(json.dumps(body))
        elif op == "ask":
            out = n.ask(json.dumps(body), hooks.get("on_text"))
        elif op == "document":
            out = n.document(body["document_id"])
        elif op == "status":
            out = n.status()
        elif op == "ingest":
            out = n.ingest(json.dumps(body), hooks.get("progress"))
        elif op == "decide":
            out = n.decide(body["chunk_id"], body["decision"], body.get("text"))
        elif op == "export_contexts":
            out = n.export_contexts(body["file"])
        elif op == "import_contexts":
            out = n.import_contexts(body["file"])
        elif op == "remove":
            out = n.remove(body["document_id"])
        elif op == "eval":
            out = n.eval(json.dumps(body), fspath(self._reports))
        elif op == "reembed":
            out = n.reembed(json.dumps(body))
        elif op == "tune":
            write = body.pop("write", None)
            out = n.tune(json.dumps(body), None if write is None else fspath(write))
        else:  # pragma: no cover - every op of _Api is above
            raise NotImplementedError(op)
        return out

    def check(self) -> Dict[str, Any]:
        """Every card compared across the store and the indexes (``situate stats``):
        ``consistent`` is ``True`` when they hold exactly the same chunks."""
        return self._native.check()  # type: ignore[no-any-return]

    def rebuild(self) -> Dict[str, Any]:
        """Rebuilds every index from the chunk cards, with no LLM call."""
        return self._native.rebuild()  # type: ignore[no-any-return]

    def verify(self, *, full: bool = True) -> Dict[str, Any]:
        """Every file of the index checked, then the cards compared with the indexes
        (``situate check``): the store with SQLite's ``integrity_check`` (``full=False``:
        its faster ``quick_check``), BM25's and the vector snapshot's checksums. Each part
        has a ``state`` (``ok``, ``damaged``, ``reloaded``, ``absent``, ``not-checked``) and
        what was ``found``; ``healthy`` is ``True`` when every file is sound and the indexes
        hold exactly the store's cards, else ``fix`` says what to do. Damage is reported
        here, not raised."""
        return self._native.verify(full)  # type: ignore[no-any-return]

    def backup(self, dir: Union[str, "PathLike[str]"]) -> Dict[str, Any]:
        """Copies the index into ``dir`` (a new or empty directory), consistently while it
        is searched and written (``situate backup``): the store by SQLite's online backup,
        the indexes at one generation, every file listed with its BLAKE3 hash in
        ``situate-backup.json``. Answers the backup's ``manifest``, ``bytes`` and
        ``seconds``; :meth:`restore` makes an index from it."""
        return self._native.backup(fspath(dir))  # type: ignore[no-any-return]

    @staticmethod
    def restore(
        backup: Union[str, "PathLike[str]"],
        path: Union[str, "PathLike[str]"],
        *,
        replace: bool = False,
    ) -> Dict[str, Any]:
        """Makes the index at ``path`` from the backup in ``backup`` (``situate restore``):
        every file is checked against the backup's manifest first (a damaged backup raises
        :class:`situate.Damaged` and writes nothing), and the restored index is checked
        after (the answer's ``check``, as :meth:`verify` answers). An index already at
        ``path`` is refused (:class:`situate.Conflict`) unless ``replace``; it is then moved
        aside, not deleted (the answer's ``replaced``). Open it with ``Index(path)``."""
        return _situate.restore(fspath(backup), fspath(path), replace)  # type: ignore[no-any-return]
