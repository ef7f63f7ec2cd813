"""``situate.Client``: the same methods as ``Index``, over a running ``situate serve``.

Only the standard library is used (``urllib``): the package needs nothing else to talk to
a service. Writes are the service's jobs (``POST /v1/jobs``); the client waits for a job to
end and answers its result, so ``Client.ingest`` returns what ``Index.ingest`` does.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional

from ._api import _Api
from .errors import SituateError, Unavailable, from_problem


class Client(_Api):
    """A situate service at ``url`` (``http://127.0.0.1:7700``), with an API ``key`` when
    the service has keys. ``timeout`` is per HTTP request, in seconds; a job (an ingest,
    an evaluation) is waited for up to ``job_timeout`` seconds (none: for as long as it
    runs).

    Errors are the same exceptions as an ``Index``'s, built from the service's
    ``application/problem+json`` answers; a service that cannot be reached is
    :class:`situate.Unavailable`.
    """

    def __init__(
        self,
        url: str,
        key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        job_timeout: Optional[float] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._key = key
        self.timeout = timeout
        self.job_timeout = job_timeout

    def __repr__(self) -> str:
        return f"situate.Client({self.url!r})"

    def _call(self, op: str, body: Dict[str, Any], **hooks: Any) -> Any:
        if op == "search":
            return self._request("POST", "/v1/search", body)
        if op == "ask":
            on_text = hooks.get("on_text")
            if on_text is None:
                return self._request("POST", "/v1/ask", body)
            return self._ask_streamed(body, on_text)
        if op == "card":
            query = _query({"neighbours": body.get("neighbours") or None})
            return self._request("GET", f"/v1/cards/{_segment(body['chunk_id'])}{query}")
        if op == "document":
            return self._request("GET", f"/v1/documents/{_segment(body['document_id'])}")
        if op == "documents":
            return self._request("GET", f"/v1/documents{_query(body)}")
        if op == "contexts":
            params = dict(body)
            params["status"] = ",".join(body.get("status") or []) or None
            return self._request("GET", f"/v1/contexts{_query(params)}")
        if op == "status":
            return self._request("GET", "/v1/info")
        if op == "ingest":
            if body.pop("dry_run", False):
                raise SituateError("a dry run is not a service job: use an Index", code="invalid-request", field="dry_run")
            job = self._request("POST", "/v1/jobs", {"kind": "ingest", **body})
            return self._wait(job, hooks.get("progress"))
        if op == "decide":
            path = f"/v1/contexts/{_segment(body['chunk_id'])}"
            answer = self._request("POST", path, {k: v for k, v in body.items() if k != "chunk_id"})
            if "card" in answer:
                card = answer["card"]
                return {"chunk_id": card["chunk_id"], "context_status": card["context_status"]}
            return self._wait(answer, None)
        if op == "remove":
            job = self._request("DELETE", f"/v1/documents/{_segment(body['document_id'])}")
            return self._wait(job, None)
        if op == "eval":
            job = self._request("POST", "/v1/jobs", {"kind": "eval", **body})
            return self._wait(job, None)
        if op == "reembed":
            job = self._request("POST", "/v1/jobs", {"kind": "reembed", **body})
            return self._wait(job, None)
        if op == "tune":
            if body.pop("write", None) is not None:
                raise SituateError(
                    "the service does not write its settings file: apply the answer's `settings` to it, or tune with situate.Index where the index is",
                    code="invalid-request",
                    field="write",
                )
            job = self._request("POST", "/v1/jobs", {"kind": "tune", **body})
            return self._wait(job, None)
        raise NotImplementedError(
            f"{op} is not in the HTTP API: run it where the index is (situate.Index or the situate command)"
        )

    def backup(self, name: Optional[str] = None) -> Dict[str, Any]:
        """A backup of the service's index, taken while it is searched and written (a
        ``backup`` job; with keys, an admin key): into the service's backups folder under
        ``name`` (one plain path segment; default: the time, UTC). Answers as
        :meth:`situate.Index.backup` does; ``situate restore`` or
        :meth:`situate.Index.restore` on the server makes an index from it."""
        body: Dict[str, Any] = {"kind": "backup"}
        if name is not None:
            body["name"] = name
        return self._wait(self._request("POST", "/v1/jobs", body), None)  # type: ignore[no-any-return]

    def rebuild(self) -> Dict[str, Any]:
        """Rebuilds the service's indexes from the chunk cards, with no LLM call (a
        ``rebuild`` job; with keys, an admin key)."""
        return self._wait(self._request("POST", "/v1/jobs", {"kind": "rebuild"}), None)  # type: ignore[no-any-return]

    def _wait(self, job: Dict[str, Any], progress: Any) -> Any:
        """Waits for a job to end; its result, or its error as the exception of its kind."""
        started = time.monotonic()
        delay = 0.05
        while job.get("state") in ("queued", "running"):
            if self.job_timeout is not None and time.monotonic() - started > self.job_timeout:
                raise Unavailable(f"job {job['id']} still {job['state']} after {self.job_timeout} s", status=503)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            job = self._request("GET", f"/v1/jobs/{_segment(job['id'])}")
            if progress is not None:
                progress({"event": "job", **job})
        if job.get("state") == "succeeded":
            return job.get("result")
        err = job.get("error") or {"code": "internal", "detail": f"job {job.get('id')} {job.get('state')}"}
        raise from_problem(err)

    def _ask_streamed(self, body: Dict[str, Any], on_text: Any) -> Any:
        """``POST /v1/ask`` with ``"stream": true``: ``text`` events go to ``on_text`` as
        they come, the ``answer`` event is the answer, an ``error`` event its exception."""
        with self._open("POST", "/v1/ask", {**body, "stream": True}, "text/event-stream") as resp:
            event, data = "message", []
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    payload = json.loads("\n".join(data))
                    if event == "text":
                        on_text(payload["text"])
                    elif event == "answer":
                        return payload
                    elif event == "error":
                        raise from_problem(payload)
                    event, data = "message", []
        raise Unavailable("the answer's stream ended without an answer", status=503)

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        with self._open(method, path, body, "application/json") as resp:
            return json.loads(resp.read() or b"null")

    def _open(self, method: str, path: str, body: Optional[Dict[str, Any]], accept: str) -> Any:
        """The response to a request; an error answer as the exception of its kind."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self._key:
            req.add_header("Authorization", f"Bearer {self._key}")
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                problem = json.loads(raw)
            except ValueError:
                problem = {"detail": raw.decode("utf-8", "replace") or e.reason}
            if not isinstance(problem, dict):
                problem = {"detail": str(problem)}
            problem.setdefault("status", e.code)
            problem.setdefault("code", _code_of(e.code))
            raise from_problem(problem) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise Unavailable(f"cannot reach {self.url}: {reason}", status=503) from None


def _segment(s: str) -> str:
    return urllib.parse.quote(s, safe="/")


def _query(params: Dict[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if v is not None}
    return "?" + urllib.parse.urlencode(kept) if kept else ""


def _code_of(status: int) -> str:
    return {400: "invalid-request", 404: "not-found", 409: "conflict", 502: "upstream-failed", 503: "unavailable"}.get(
        status, "internal"
    )
