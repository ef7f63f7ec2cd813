//! Faults a machine gives: a disk that fills up in the middle of a write. The disk is a
//! small tmpfs this test mounts (CI runs as root), filled to leave less and less room, so
//! that an ingest, a rebuild and a backup run out of space at each of their write points in
//! turn (the store's commit, BM25's, the vector snapshot, the backup's copies): each fails
//! with the disk-full advice, searches still answer, and once there is room the same
//! command finishes and the index checks healthy.

use crate::*;
use std::fs;

/// A tmpfs of `mb` MiB mounted at a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mb: u32) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tmp");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs to fill it, which needs root (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Free bytes.
    fn free(&self) -> u64 {
        let out = std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.path())
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df's answer")
    }

    /// Fills the disk until `left` bytes are free.
    fn fill_to(&self, left: u64) {
        let free = self.free();
        let filler = self.path().join("filler");
        let _ = fs::remove_file(&filler);
        if free > left {
            let f = fs::File::create(&filler).expect("filler");
            // Written, not sparse: tmpfs counts only pages that exist.
            let mut w = std::io::BufWriter::new(f);
            let block = vec![0u8; 4096];
            let mut n = 0;
            while n + 4096 <= free - left {
                std::io::Write::write_all(&mut w, &block).expect("fill");
                n += 4096;
            }
            std::io::Write::flush(&mut w).expect("flush");
        }
    }

    fn empty(&self) {
        let _ = fs::remove_file(self.path().join("filler"));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

fn full_disk_error(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("The disk is full. Nothing committed was lost")
            || err
                .contains("most likely a full disk (the log names it). Nothing committed was lost"),
        "not the disk-full advice:\n{err}"
    );
}

#[test]
fn a_disk_that_fills_at_any_write_point_loses_nothing() {
    let disk = Tmpfs::mount(24);
    let docs = fixtures().join("corpus");
    let more = tempfile::tempdir().expect("tmp");
    for i in 0..40 {
        fs::write(
            more.path().join(format!("m{i:02}.md")),
            format!(
                "# Manual {i}\n\n{}",
                "The gearbox of line {i} is oiled every week; its seals are checked monthly. "
                    .repeat(30)
            ),
        )
        .expect("write");
    }
    let ingest = |index: &Path, what: &Path| {
        let mut c = situate(index);
        c.arg("ingest").arg(what).args([
            "--embedder",
            "hash:64",
            "--max-tokens",
            "60",
            "--batch",
            "8",
            "--quiet",
        ]);
        c
    };
    // What the second ingest needs, measured once with room to spare.
    let base = disk.path().join("base");
    run(&mut ingest(&base, &docs), 0);
    let before = disk.free();
    let probe = disk.path().join("probe");
    run(situate(&base).arg("backup").arg(&probe), 0);
    let backup_needs = before - disk.free();
    fs::remove_dir_all(&probe).expect("rm");
    let sized = disk.path().join("sized");
    run(situate(&base).arg("backup").arg(&sized), 0);
    let restored = disk.path().join("sized-index");
    run(situate(&restored).arg("restore").arg(&sized), 0);
    fs::remove_dir_all(&sized).expect("rm");
    let before = disk.free();
    run(&mut ingest(&restored, more.path()), 0);
    let ingest_needs = before - disk.free();
    let want = documents(&restored);
    fs::remove_dir_all(&restored).expect("rm");
    let base_docs = documents(&base);

    let steps = 12u64;
    let mut failed = 0;
    for step in 0..steps {
        let left = ingest_needs * step / steps;
        // A fresh copy of the base index for each step.
        let index = disk.path().join(format!("idx-{step}"));
        let copy = disk.path().join("copy");
        run(situate(&base).arg("backup").arg(&copy), 0);
        run(situate(&index).arg("restore").arg(&copy), 0);
        fs::remove_dir_all(&copy).expect("rm");
        disk.fill_to(left);

        let out = ingest(&index, more.path()).output().expect("runs");
        if !out.status.success() {
            failed += 1;
            full_disk_error(&out);
            // Searches answer meanwhile, from what was committed (unless not one byte is
            // left: SQLite cannot even make its shared-memory file, and says the disk is
            // full).
            let s = situate(&index)
                .args(["search", "gearbox seals", "--mode", "bm25"])
                .output()
                .expect("runs");
            if !s.status.success() {
                assert_eq!(step, 0, "a search failed with {left} bytes left");
                full_disk_error(&s);
            }
            // A rebuild on the full disk fails the same way, or succeeds.
            let r = situate(&index).arg("rebuild").output().expect("runs");
            if !r.status.success() {
                full_disk_error(&r);
            }
        }
        // A backup to the full disk fails cleanly and leaves no partial backup.
        let target = disk.path().join(format!("bk-{step}"));
        if disk.free() < backup_needs {
            let b = situate(&index)
                .arg("backup")
                .arg(&target)
                .output()
                .expect("runs");
            if !b.status.success() {
                full_disk_error(&b);
                assert!(!target.exists(), "a partial backup was left at step {step}");
                let leftovers: Vec<_> = fs::read_dir(disk.path())
                    .expect("dir")
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().contains(".partial-"))
                    .collect();
                assert!(leftovers.is_empty(), "{leftovers:?}");
            } else {
                fs::remove_dir_all(&target).expect("rm");
            }
        }
        disk.empty();
        // With room again, the same command finishes the work.
        run(&mut ingest(&index, more.path()), 0);
        assert_eq!(documents(&index), want, "step {step}");
        let v = json(situate(&index).arg("check"), 0);
        assert_eq!(v["healthy"], true, "step {step}: {v:#}");
        fs::remove_dir_all(&index).expect("rm");
    }
    assert!(base_docs < want);
    assert!(
        failed >= steps / 2,
        "only {failed} of {steps} ingests met a full disk"
    );
}
