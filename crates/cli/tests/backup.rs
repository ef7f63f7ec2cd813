//! `situate backup` and `situate restore`: a consistent copy taken while an ingest and
//! searches run, restored and checked; a damaged backup restores nothing; an index is
//! replaced only when asked, and kept aside.

use crate::*;
use std::fs;

/// Writes `n` documents named `prefix-NNN.md` into `dir`.
fn write_docs(dir: &Path, prefix: &str, n: usize) {
    fs::create_dir_all(dir).expect("mkdir");
    for i in 0..n {
        let body: String = (0..8)
            .map(|p| {
                format!(
                    "Section {p} of {prefix} log {i}: valve {} at depot {} was serviced after {} cycles.\n\n",
                    i * 3 + p,
                    i % 11,
                    500 + i * 13 + p
                )
            })
            .collect();
        fs::write(
            dir.join(format!("{prefix}-{i:04}.md")),
            format!("# {prefix} log {i}\n\n{body}"),
        )
        .expect("write");
    }
}

fn ingest_args(index: &Path, docs: &Path) -> Command {
    let mut c = situate(index);
    c.arg("ingest").arg(docs).args([
        "--max-tokens",
        "40",
        "--overlap",
        "0",
        "--embedder",
        "hash:64",
        "--quiet",
    ]);
    c
}

#[test]
fn a_backup_taken_during_an_ingest_restores_to_a_consistent_index() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    write_docs(&tmp.path().join("first"), "first", 30);
    run(&mut ingest_args(&index, &tmp.path().join("first")), 0);
    let first = documents(&index);
    // A second ingest large enough to commit many batches while backups are taken.
    let second = tmp.path().join("second");
    write_docs(&second, "second", 1500);
    let mut child = ingest_args(&index, &second)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the ingest");

    let mut during = Vec::new();
    for n in 0.. {
        // Searches go on meanwhile.
        assert!(!search_ids(&index, "valve serviced depot", &[]).is_empty());
        let dir = tmp.path().join(format!("backup-{n}"));
        let v = json(situate(&index).arg("backup").arg(&dir), 0);
        let running = child.try_wait().expect("poll").is_none();
        assert!(dir.join("situate-backup.json").is_file(), "{v:#}");
        if running {
            during.push((
                dir,
                v["manifest"]["generation"].as_u64().expect("generation"),
            ));
        } else {
            break;
        }
    }
    let out = child.wait_with_output().expect("the ingest ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !during.is_empty(),
        "no backup finished while the ingest was running"
    );
    let last = documents(&index);
    assert_eq!(last, first + 1500);

    let generations: Vec<u64> = during.iter().map(|(_, g)| *g).collect();
    eprintln!("backups during the ingest at generations {generations:?}");
    assert!(
        generations.last() > generations.first(),
        "the ingest committed between backups: {generations:?}"
    );
    // The first, the last and two between are restored.
    let picks = [0, during.len() / 3, 2 * during.len() / 3, during.len() - 1];
    for i in picks {
        let (dir, generation) = &during[i];
        let restored = tmp.path().join(format!("restored-{i}"));
        let v = json(situate(&restored).arg("restore").arg(dir), 0);
        assert_eq!(v["check"]["healthy"], true, "{v:#}");
        assert_eq!(v["generation"], *generation);
        // A whole number of batches: every document it holds has all its chunks.
        let docs = documents(&restored);
        assert!((first..=last).contains(&docs), "{docs} documents");
        assert!(!search_ids(&restored, "valve serviced depot", &[]).is_empty());
    }
    // After the ingest: a backup restores to the same cards and the same answers.
    let dir = tmp.path().join("backup-after");
    run(situate(&index).arg("backup").arg(&dir), 0);
    let restored = tmp.path().join("restored-after");
    run(situate(&restored).arg("restore").arg(&dir), 0);
    assert_eq!(documents(&restored), last);
    for mode in ["bm25", "vector", "hybrid"] {
        let q = "valve 42 depot serviced";
        assert_eq!(
            search_ids(&restored, q, &["--mode", mode]),
            search_ids(&index, q, &["--mode", mode]),
            "{mode}"
        );
    }
    let v = json(situate(&restored).arg("check"), 0);
    assert_eq!(v["healthy"], true, "{v:#}");
}

#[test]
fn a_damaged_backup_restores_nothing_and_an_index_is_replaced_only_when_asked() {
    let (tmp, index) = indexed_corpus("hash:64");
    let backup = tmp.path().join("backup");
    run(situate(&index).arg("backup").arg(&backup), 0);
    // Not into an existing backup.
    let out = run(situate(&index).arg("backup").arg(&backup), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an empty directory"));

    // Over an index: refused without --replace; with it, the old index is kept aside.
    let out = run(situate(&index).arg("restore").arg(&backup), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--replace"));
    let before = search_ids(&index, "install the package", &[]);
    run(
        situate(&index)
            .arg("rm")
            .arg(before[0].split('#').next().expect("doc")),
        0,
    );
    let v = json(
        situate(&index).arg("restore").arg(&backup).arg("--replace"),
        0,
    );
    let aside = PathBuf::from(v["replaced"].as_str().expect("replaced"));
    assert!(aside.join("cards.db").is_file(), "{v:#}");
    assert_eq!(search_ids(&index, "install the package", &[]), before);

    // One flipped byte in the backup: the restore names the file and writes nothing.
    let db = backup.join("cards.db");
    let mut bytes = fs::read(&db).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    fs::write(&db, bytes).expect("write");
    let fresh = tmp.path().join("fresh");
    let out = run(situate(&fresh).arg("restore").arg(&backup), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is damaged") && err.contains("cards.db does not match its hash"),
        "{err}"
    );
    assert!(!fresh.exists());
    // Not a backup at all.
    let out = run(situate(&fresh).arg("restore").arg(tmp.path()), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a situate backup"));
}

#[test]
fn an_admin_backup_job_runs_beside_an_ingest_job() {
    use crate::serve::{Server, assert_problem};
    use serde_json::json;
    let (tmp, index) = indexed_corpus("hash:64");
    let docs = tmp.path().join("logs");
    write_docs(&docs, "depot", 1500);
    let backups = tmp.path().join("backups");
    let s = Server::start(
        &index,
        &["--backups", backups.to_str().expect("utf-8")],
        &[],
    );
    let bad = s.post("/v1/jobs", &json!({"kind": "backup", "name": "../x"}));
    assert_problem(&bad, 400, "invalid-request");
    assert_eq!(bad.body["field"], "name", "{:#}", bad.body);

    let ingest = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "paths": [docs], "batch": 25}),
    );
    let ingest_id = ingest.body["id"].as_str().expect("id").to_string();
    // Wait until the ingest has committed a batch, then back up while it goes on.
    loop {
        let st = s.get(&format!("/v1/jobs/{ingest_id}")).body;
        assert_ne!(st["state"], "failed", "{st:#}");
        if st["commits"].as_u64().unwrap_or(0) >= 1 || st["state"] == "succeeded" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let job = s.post("/v1/jobs", &json!({"kind": "backup", "name": "during"}));
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let still = s.get(&format!("/v1/jobs/{ingest_id}")).body;
    assert_eq!(
        still["state"], "running",
        "the backup waited for the ingest: {still:#}"
    );
    let dir = PathBuf::from(done["result"]["backup"].as_str().expect("backup"));
    assert_eq!(dir, backups.join("during"));
    let ended = s.wait_job(&ingest_id);
    assert_eq!(ended["state"], "succeeded", "{ended:#}");

    let restored = tmp.path().join("restored");
    let v = json(situate(&restored).arg("restore").arg(&dir), 0);
    assert_eq!(v["check"]["healthy"], true, "{v:#}");
    let docs = documents(&restored);
    assert!(docs < documents(&index), "{docs}: taken mid-ingest");
}
