"""The package's Index against a real index: every method, its errors by kind, threads
and asyncio."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest

import situate


def test_a_search_keeps_the_original_and_its_context_apart_with_each_legs_rank(index: situate.Index) -> None:
    result = index.search("how often are the signing keys rotated?", k=3)
    assert isinstance(result, situate.SearchResult)
    assert result.mode == "hybrid"
    best = result.hits[0]
    assert best.document_id == "docs/keys.md"
    assert "vault rotate" in best.original_text
    assert best.context is not None and best.context not in best.original_text
    assert {leg.leg for leg in best.legs} == {"bm25", "vector"}
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert len(result.hits) == 3
    # The result is also the list of its hits.
    assert list(result) == result.hits and result[0] == best and len(result) == 3


def test_search_settings_and_filters_by_their_names(index: situate.Index) -> None:
    bm25 = index.search("tea", k=5, mode="bm25")
    assert bm25.mode == "bm25"
    assert all(leg.leg == "bm25" for h in bm25.hits for leg in h.legs)
    only = index.search("degrees", filters={"paths": "docs/lamp*"})
    assert {h.document_id for h in only.hits} == {"docs/lamp.md"}
    plain = index.search("rotate keys", k=2, bm25="plain", context_weight=0.0)
    assert plain.bm25 == "plain"


def test_an_invalid_field_is_invalid_request_naming_the_field(index: situate.Index) -> None:
    with pytest.raises(situate.InvalidRequest) as e:
        index.search("x", k=0)
    assert e.value.field == "k" and e.value.code == "invalid-request" and e.value.status == 400
    with pytest.raises(situate.InvalidRequest) as e:
        index.search("x", colour="red")
    assert e.value.field == "colour"
    with pytest.raises(ValueError):  # InvalidRequest is a ValueError too
        index.search("   ")


def test_a_missing_card_or_index_is_not_found(index: situate.Index, tmp_path: Path) -> None:
    with pytest.raises(situate.NotFound) as e:
        index.card("no-such-chunk")
    assert e.value.status == 404
    with pytest.raises(situate.NotFound, match="create=True"):
        situate.Index(tmp_path / "nothing-here")
    assert not (tmp_path / "nothing-here").exists()


def test_a_card_its_document_and_its_neighbours(index: situate.Index) -> None:
    hit = index.search("revoke a leaked key", k=1).hits[0]
    card = index.card(hit.chunk_id, neighbours=1)
    assert card.chunk_id == hit.chunk_id and card.original_text == hit.original_text
    assert card.document.id == hit.document_id and card.document.language == "en"
    assert card.indexed_text.endswith(card.original_text)
    assert card.neighbours is not None
    detail = index.document(hit.document_id)
    assert hit.chunk_id in detail.chunk_ids


def test_documents_page_by_page(index: situate.Index) -> None:
    first = index.documents(limit=2)
    assert len(first.documents) == 2 and first.next_cursor
    seen = [d.id for d in first.documents]
    cursor = first.next_cursor
    while cursor:
        page = index.documents(limit=2, cursor=cursor)
        seen += [d.id for d in page.documents]
        cursor = page.next_cursor
    assert sorted(seen) == sorted(f"docs/{n}" for n in ("keys.md", "deploy.md", "refunds.md", "tea.md", "lamp.md"))


def test_status_and_check(index: situate.Index) -> None:
    s = index.status()
    assert s.default_mode == "hybrid"
    assert s.cpu["level"] in s.cpu["runs"]
    assert s.stats["store"]["documents"] == 5
    assert index.check()["consistent"] is True


def test_texts_with_ids_and_metadata_are_ingested_and_filtered(small: situate.Index) -> None:
    events: list = []
    out = small.ingest(
        texts=["Refunds are paid within 30 days.", "Deploys run on Tuesdays."],
        ids=["kb/1", "kb/2"],
        metadatas=[{"team": "support"}, {"team": "ops"}],
        progress=events.append,
    )
    assert isinstance(out, situate.IngestResult)
    assert (out.created, out.report.added, out.report.chunks) == (False, 2, 2)
    assert [e["id"] for e in events if e["event"] == "document"] == ["kb/1", "kb/2"]
    assert any(e["event"] == "committed" for e in events)
    hits = small.search("when are refunds paid", filters={"meta": {"team": "support"}}).hits
    assert [h.document_id for h in hits] == ["kb/1"]
    again = small.ingest(texts=[{"id": "kb/1", "text": "Refunds are paid within 30 days.", "metadata": {"team": "support"}}])
    assert again.report.unchanged == 1 and again.report.added == 0


def test_bad_ingests_are_refused_or_skipped_with_their_reason(small: situate.Index) -> None:
    with pytest.raises(situate.InvalidRequest) as e:
        small.ingest()
    assert e.value.field == "paths"
    with pytest.raises(situate.InvalidRequest) as e:
        small.ingest(texts=["no id"])
    assert e.value.field == "ids"
    with pytest.raises(situate.InvalidRequest) as e:
        small.ingest(texts=[{"id": "a", "text": "b"}], context="telepathy")
    assert "telepathy" in str(e.value)
    out = small.ingest(texts=[{"id": "a", "text": "   "}, {"id": "b", "text": "fine"}])
    assert out.report.added == 1
    assert [s["source"] for s in out.report.skipped] == ["a"]


def test_an_exception_in_the_progress_callback_stops_the_ingest_and_is_raised(small: situate.Index, tmp_path: Path) -> None:
    docs = tmp_path / "many"
    docs.mkdir()
    for i in range(20):
        (docs / f"{i:02}.md").write_text(f"# Note {i}\n\nThis is note number {i}.\n")

    def stop(event: dict) -> None:
        if event["event"] == "document" and event["id"].endswith("05.md"):
            raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        small.ingest(docs, batch=2, progress=stop)
    kept = small.status().stats["store"]["documents"]
    assert 0 < kept < 20, kept
    rest = small.ingest(docs)
    assert rest.report.unchanged == kept and rest.report.added == 20 - kept


def test_a_dry_run_writes_nothing(small: situate.Index, corpus: Path) -> None:
    answer = small.ingest(corpus, context="llm", dry_run=True)
    assert answer["dry_run"] is True and answer["documents"] == 5
    assert small.status().stats["store"]["documents"] == 0


def test_contexts_review_export_and_import(index_copy: situate.Index, tmp_path: Path) -> None:
    hit = index_copy.search("green tea", k=1).hits[0]
    decided = index_copy.contexts.set(hit.chunk_id, "edit", "From the tea guide: brewing temperatures.")
    assert decided.context_status == "verified" or decided.context_status == "manual" or decided.context_status
    card = index_copy.card(hit.chunk_id)
    assert card.generated_context == "From the tea guide: brewing temperatures."
    assert card.context_provenance is not None and card.context_provenance["method"] == "manual"
    with pytest.raises(situate.InvalidRequest) as e:
        index_copy.contexts.set(hit.chunk_id, "edit")
    assert e.value.field == "text"
    listed = list(index_copy.contexts.iter())
    assert any(c.chunk_id == hit.chunk_id for c in listed)
    export = index_copy.contexts.export(tmp_path / "contexts.jsonl")
    assert export.exported >= 5
    lines = [json.loads(x) for x in (tmp_path / "contexts.jsonl").read_text().splitlines()]
    assert any(x["chunk_id"] == hit.chunk_id for x in lines)
    imported = index_copy.contexts.import_(tmp_path / "contexts.jsonl")
    assert imported.imported == export.exported and imported.skipped == []


def test_remove_and_a_second_writer_is_busy(index_copy: situate.Index) -> None:
    index_copy.remove("docs/tea.md")
    assert all(h.document_id != "docs/tea.md" for h in index_copy.search("green tea", k=5).hits)
    with pytest.raises(situate.NotFound):
        index_copy.remove("docs/tea.md")


def test_four_threads_search_at_once_and_agree_with_one(index: situate.Index) -> None:
    queries = ["rotate keys", "refund days", "deploy tuesday", "green tea", "replace bulb"] * 4
    alone = {q: [h.chunk_id for h in index.search(q, k=3).hits] for q in set(queries)}
    got: dict = {}
    errors: list = []

    def work(qs: list) -> None:
        try:
            for q in qs:
                got.setdefault(q, []).append([h.chunk_id for h in index.search(q, k=3).hits])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(queries[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for q, runs in got.items():
        assert all(r == alone[q] for r in runs), q


def test_async_variants_answer_as_the_calls_do(index: situate.Index) -> None:
    async def main() -> tuple:
        return await asyncio.gather(index.asearch("rotate keys", 2), index.astatus(), index.acard(index.search("tea", k=1).hits[0].chunk_id))

    found, status, card = asyncio.run(main())
    assert [h.chunk_id for h in found.hits] == [h.chunk_id for h in index.search("rotate keys", 2).hits]
    assert status.stats["store"]["documents"] == 5
    assert card.document.id == "docs/tea.md"


def test_eval_runs_a_set_of_questions_against_the_index(index: situate.Index, tmp_path: Path) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        "\n".join(
            json.dumps(q)
            for q in [
                {"query": "how often are signing keys rotated", "relevant": ["docs/keys.md"]},
                {"query": "when do production deploys run", "relevant": ["docs/deploy.md"]},
            ]
        )
    )
    reports = tmp_path / "reports"
    ix = situate.Index(index.path, reports=reports)
    result = ix.eval(questions, name="smoke", configs=["bm25+indexed"])
    assert result.id == "smoke"
    assert (reports / "smoke" / "report.json").is_file()
    assert result.report


def test_an_option_an_ingest_does_not_take_is_refused_by_name(small: situate.Index) -> None:
    with pytest.raises(situate.InvalidRequest, match="pathz"):
        small.ingest(texts=[{"id": "a", "text": "b"}], pathz=["x"])
    with pytest.raises(situate.InvalidRequest, match="colour"):
        small.ingest(texts=[{"id": "a", "text": "b", "colour": "red"}])


def test_a_damaged_bm25_file_raises_damaged_and_rebuild_repairs_it(built_index: Path, tmp_path: Path) -> None:
    dst = tmp_path / "idx"
    shutil.copytree(built_index, dst)
    term = next(dst.glob("bm25-*/*.term"))
    data = bytearray(term.read_bytes())
    data[len(data) // 2] ^= 0xFF
    term.write_bytes(bytes(data))
    damaged = situate.Index(dst)
    found = damaged.verify()
    assert found["healthy"] is False and found["bm25"]["state"] == "damaged"
    assert found["store"]["state"] == "ok" and "situate rebuild" in found["fix"]
    with pytest.raises(situate.Damaged) as e:
        damaged.search("green tea", k=1)
    assert e.value.code == "damaged" and "situate rebuild" in str(e.value) and term.name in str(e.value)
    report = damaged.rebuild()
    assert report["chunks"] > 0
    assert damaged.search("green tea", k=1).hits
    assert damaged.verify(full=False)["healthy"] is True


def test_a_backup_restores_to_the_same_index_and_a_damaged_one_writes_nothing(index_copy: situate.Index, tmp_path: Path) -> None:
    checked = index_copy.verify()
    assert checked["healthy"] is True and checked["full"] is True and checked["fix"] is None
    assert [checked[p]["state"] for p in ("store", "bm25", "vectors")] == ["ok", "ok", "ok"]
    made = index_copy.backup(tmp_path / "b")
    paths = [f["path"] for f in made["manifest"]["files"]]
    assert "cards.db" in paths and made["bytes"] > 0
    with pytest.raises(situate.InvalidRequest):
        index_copy.backup(tmp_path / "b")  # not empty: a backup never overwrites one
    with pytest.raises(situate.Conflict, match="replace=True"):
        situate.Index.restore(tmp_path / "b", index_copy.path)
    restored = situate.Index.restore(tmp_path / "b", tmp_path / "restored")
    assert restored["check"]["healthy"] is True and restored["replaced"] is None
    q = "how often are the signing keys rotated?"
    again = situate.Index(tmp_path / "restored")
    assert [h.chunk_id for h in again.search(q, k=3).hits] == [h.chunk_id for h in index_copy.search(q, k=3).hits]
    replaced = situate.Index.restore(tmp_path / "b", tmp_path / "restored", replace=True)
    assert replaced["replaced"] and Path(replaced["replaced"]).is_dir()
    store = tmp_path / "b" / "cards.db"
    data = bytearray(store.read_bytes())
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(bytes(data))
    with pytest.raises(situate.Damaged, match="cards.db"):
        situate.Index.restore(tmp_path / "b", tmp_path / "from-damaged")
    assert not (tmp_path / "from-damaged").exists()


QUESTIONS = [
    {"query": "how often are signing keys rotated", "relevant": ["docs/keys.md"]},
    {"query": "when do production deploys run", "relevant": ["docs/deploy.md"]},
    {"query": "how long does a refund take", "relevant": ["docs/refunds.md"]},
    {"query": "what temperature for green tea", "relevant": ["docs/tea.md"]},
    {"query": "how do I replace the bulb", "relevant": ["docs/lamp.md"]},
    {"query": "revoke a leaked key", "relevant": ["docs/keys.md"]},
]


def write_questions(path: Path) -> Path:
    path.write_text("\n".join(json.dumps(q) for q in QUESTIONS))
    return path


def test_fusion_settings_by_name_and_the_fusion_the_index_records(index: situate.Index) -> None:
    default = index.search("rotate keys", k=3)
    assert default.fusion is not None and default.fusion["from"] == "index"
    tm2c2 = index.search("rotate keys", k=3, fusion="tm2c2", alpha=0.3)
    assert tm2c2.fusion is not None and tm2c2.fusion["fusion"] == "tm2c2" and tm2c2.fusion["from"] == "settings"
    assert abs(tm2c2.fusion["vector_weight"] - 0.3) < 1e-6
    fused = [leg for h in tm2c2.hits for leg in h.legs]
    assert fused and all(leg.normalized is not None and 0.0 <= leg.normalized <= 1.0 for leg in fused)
    with pytest.raises(situate.InvalidRequest) as e:
        index.search("x", fusion="borda")
    assert e.value.field == "fusion"
    with pytest.raises(situate.InvalidRequest) as e:
        index.search("x", alpha=0.5, vector_weight=2.0)
    assert e.value.field == "alpha"


def test_tune_scores_a_grid_by_cross_validation_and_writes_only_a_change(index: situate.Index, tmp_path: Path) -> None:
    questions = write_questions(tmp_path / "questions.jsonl")
    toml = tmp_path / "situate.toml"
    a = index.tune(questions, folds=3, grid={"fusions": ["rrf", "tm2c2"], "alphas": [0.3, 0.5, 0.7]}, write=toml)
    assert a["questions"] == len(QUESTIONS) and a["folds"] == 3 and a["metric"] == "ndcg@10"
    assert a["decision"] in ("keep", "change") and a["reason"]
    assert len(a["out_of_sample"]["fold_gains"]) == 3
    assert a["best"]["score"] >= a["current"]["score"]
    # A file is written only for a change, and then it reads back as settings.
    assert toml.exists() == (a["decision"] == "change")
    with pytest.raises(situate.InvalidRequest) as e:
        index.tune(questions, folds=1)
    assert e.value.field == "folds"


def test_reembed_moves_the_index_to_another_embedder(small: situate.Index) -> None:
    small.ingest(texts=["Refunds take 30 days.", "Deploys run on Tuesdays."], ids=["a", "b"])
    a = small.reembed("hash:32")
    assert a["switched"] and a["previous"] == "hash:64" and a["embedder"] == "hash:32"
    assert a["vectors"] == 2 and a["embedded"] == 2
    assert small.status().stats["embed_model"] == "hash:32"
    assert small.search("refunds", k=1).hits[0].document_id == "a"
    with pytest.raises(situate.InvalidRequest) as e:
        small.reembed("no-such-model")
    assert e.value.field == "embedder"
