"""Every dataclass has exactly the fields of the engine's wire type it mirrors (the
engine's own JSON Schema, from the native module): a field added or renamed in Rust fails
here until the package follows."""

from __future__ import annotations

import dataclasses
import json

import pytest

import situate
from situate import _situate, types

MIRRORS = {
    types.SearchResult: "SearchResponse",
    types.Hit: "Hit",
    types.LegScore: "LegScore",
    types.Card: "CardAnswer",
    types.Document: "StoredDocument",
    types.DocumentDetail: "DocumentDetail",
    types.DocumentPage: "DocumentPage",
    types.ContextPage: "ContextPage",
    types.ContextItem: "ContextItem",
    types.Status: "StatusAnswer",
    types.Answer: "AnswerResponse",
    types.Citation: "Citation",
    types.IngestResult: "IngestOutcome",
    types.IngestReport: "IngestReport",
    types.Decision: "DecisionAnswer",
    types.Export: "ExportAnswer",
}


@pytest.mark.parametrize("cls", list(MIRRORS), ids=lambda c: c.__name__)
def test_a_dataclass_has_its_wire_types_fields(cls: type) -> None:
    schema = json.loads(_situate.schema(MIRRORS[cls]))
    wire = set(schema["properties"])
    ours = {f.name for f in dataclasses.fields(cls)}
    assert ours == wire, f"{cls.__name__}: missing {sorted(wire - ours)}, extra {sorted(ours - wire)}"
    # A field the wire always sends has no default here, and an optional one has.
    required = set(schema.get("required", []))
    defaulted = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}  # type: ignore[misc]
    assert defaulted == wire - required, cls.__name__


def test_nested_schemas_the_package_reads_as_classes() -> None:
    hit = json.loads(_situate.schema("Hit"))
    assert set(hit["$defs"]["Place"]["properties"]) == {f.name for f in dataclasses.fields(types.Place)}
    answer = json.loads(_situate.schema("AnswerResponse"))
    assert set(answer["$defs"]["Passage"]["properties"]) == {f.name for f in dataclasses.fields(types.Passage)}


def test_a_newer_services_extra_field_is_left_out() -> None:
    leg = types.from_wire(types.LegScore, {"leg": "bm25", "rank": 1, "score": 2.0, "new": True})
    assert leg == types.LegScore("bm25", 1, 2.0)


def test_every_error_kind_of_the_engine_has_its_class() -> None:
    codes = ["invalid-request", "not-found", "conflict", "locked", "unavailable", "upstream-failed", "model-missing", "internal", "damaged"]
    for code in codes:
        e = situate.errors.from_problem({"code": code, "detail": "x"})
        assert type(e) is not situate.SituateError and e.code == code
    missing = situate.errors.from_problem({"code": "model-missing", "detail": "no model", "install": "situate models install m"})
    assert isinstance(missing, situate.ModelMissing) and "situate models install m" in str(missing)


def test_the_native_module_makes_the_registered_classes_with_their_fields(index: "situate.Index") -> None:
    r = index.search("rotate keys", 2)
    assert type(r) is types.SearchResult and type(r.hits[0]) is types.Hit
    assert all(type(leg) is types.LegScore for leg in r.hits[0].legs)
    # Made as from_wire makes them from the same answer's JSON.
    assert set(vars(r.hits[0])) == {f.name for f in dataclasses.fields(types.Hit)}
    assert types.from_wire(types.Hit, json.loads(json.dumps(dataclasses.asdict(r.hits[0])))) == r.hits[0]
    assert sorted(types.WIRE_TYPES) == sorted(set(types.WIRE_TYPES))
