//! A process killed mid-ingest leaves a consistent index; re-running finishes the job with
//! nothing lost and nothing duplicated. The indexes have vectors from the hashing embedder
//! (`hash:64`: the vector protocol without a model's time).

use crate::*;
use std::time::{Duration, Instant};

fn corpus(root: &Path, files: usize) {
    std::fs::create_dir_all(root).expect("mkdir");
    for i in 0..files {
        let body: String = (0..12)
            .map(|p| {
                format!(
                    "Report {i}, part {p}: the station measured {} millimetres of rain.\n\n",
                    i * 7 + p
                )
            })
            .collect();
        std::fs::write(root.join(format!("r{i:04}.txt")), body).expect("w");
    }
}

/// The chunk count of a clean ingest of `root`, for comparison.
fn reference_chunks(tmp: &Path, root: &Path) -> u64 {
    let index = tmp.join("reference");
    let v = json(
        situate(&index).arg("ingest").arg(root).args([
            "--max-tokens",
            "40",
            "--embedder",
            "hash:64",
        ]),
        0,
    );
    v["report"]["chunks"].as_u64().expect("n")
}

fn assert_complete(index: &Path, files: u64, chunks: u64) {
    let s = consistent_stats(index);
    assert_eq!(s["stats"]["store"]["documents"], files, "{s:#}");
    assert_eq!(s["stats"]["store"]["chunks"], chunks, "{s:#}");
    assert_eq!(s["stats"]["bm25_chunks"], chunks, "{s:#}");
    assert_eq!(s["stats"]["vectors"], chunks, "{s:#}");
}

#[test]
fn crash_points_between_store_and_index() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("reports");
    corpus(&root, 30);
    let want = reference_chunks(tmp.path(), &root);
    for point in ["store-commit", "index-commit", "vector-switch"] {
        let index = tmp.path().join(format!("idx-{point}"));
        let out = situate(&index)
            .arg("ingest")
            .arg(&root)
            .args([
                "--max-tokens",
                "40",
                "--batch",
                "7",
                "--embedder",
                "hash:64",
            ])
            .env("SITUATE_CRASH_AT", point)
            .output()
            .expect("runs");
        assert!(!out.status.success(), "the crash hook fired at {point}");
        // Readers see a consistent index straight away (they catch the index up).
        let s = consistent_stats(&index);
        assert!(
            s["stats"]["store"]["documents"].as_u64().expect("n") >= 7,
            "the first batch survived: {s:#}"
        );
        let v = json(
            situate(&index).arg("ingest").arg(&root).args([
                "--max-tokens",
                "40",
                "--batch",
                "7",
                "--embedder",
                "hash:64",
            ]),
            0,
        );
        assert!(v["report"]["unchanged"].as_u64().expect("n") >= 7, "{v:#}");
        assert_complete(&index, 30, want);
    }
}

#[test]
fn a_crash_while_an_index_is_created_leaves_no_half_made_index() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("reports");
    corpus(&root, 3);
    let index = tmp.path().join("idx");
    let ingest = |crash: Option<&str>| {
        let mut c = situate(&index);
        c.arg("ingest")
            .arg(&root)
            .args(["--max-tokens", "40", "--embedder", "hash:64"]);
        if let Some(p) = crash {
            c.env("SITUATE_CRASH_AT", p);
        }
        c
    };
    let out = ingest(Some("index-create")).output().expect("runs");
    assert!(!out.status.success(), "the crash hook fired");
    // The creation settings and the store appear together or not at all.
    let out = run(situate(&index).arg("stats"), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no situate index"));
    // The re-run creates it with the settings asked for.
    run(&mut ingest(None), 0);
    let s = consistent_stats(&index);
    assert_eq!(s["stats"]["embedder"], "hash:64", "{s:#}");
    assert_eq!(s["stats"]["store"]["documents"], 3, "{s:#}");
}

#[test]
fn crash_during_rebuild_keeps_the_old_index() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("reports");
    corpus(&root, 5);
    let index = tmp.path().join("idx");
    let want = json(
        situate(&index).arg("ingest").arg(&root).args([
            "--max-tokens",
            "40",
            "--embedder",
            "hash:64",
        ]),
        0,
    )["report"]["chunks"]
        .as_u64()
        .expect("n");
    let out = situate(&index)
        .arg("rebuild")
        .env("SITUATE_CRASH_AT", "rebuild-switch")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert_complete(&index, 5, want);
    run(situate(&index).arg("rebuild"), 0);
    assert_complete(&index, 5, want);
    let dirs: Vec<String> = std::fs::read_dir(&index)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bm25-"))
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "leftovers of the crashed rebuild are removed: {dirs:?}"
    );
}

#[test]
fn kill_9_at_several_moments_then_resume() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("reports");
    corpus(&root, 300);
    let want = reference_chunks(tmp.path(), &root);
    // Kill after a growing delay so that some runs die early, some mid-way, some late.
    for (attempt, delay_ms) in [30u64, 120, 400].into_iter().enumerate() {
        let index = tmp.path().join(format!("idx-{attempt}"));
        let mut child = situate(&index)
            .arg("ingest")
            .arg(&root)
            .args([
                "--max-tokens",
                "40",
                "--batch",
                "10",
                "--quiet",
                "--embedder",
                "hash:64",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(delay_ms) {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
        child.wait().expect("reaped");
        if index.join("cards.db").exists() {
            consistent_stats(&index);
        }
        run(
            situate(&index).arg("ingest").arg(&root).args([
                "--max-tokens",
                "40",
                "--batch",
                "10",
                "--embedder",
                "hash:64",
            ]),
            0,
        );
        assert_complete(&index, 300, want);
    }
}
