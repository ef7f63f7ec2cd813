//! Backups: a consistent copy of an index taken while it is searched and written
//! ([`Engine::backup_at`]), and its restore ([`Engine::restore_at`]).
//!
//! A backup is a directory: the store copied by SQLite in one read transaction (`VACUUM
//! INTO`, so an ingest goes on meanwhile and the copy is the store as of one commit), the
//! BM25 index as of its last commit, the vector snapshot, and `situate-backup.json`, which
//! lists every file with its size and BLAKE3 hash. The derived indexes are copied *before*
//! the store, so they never reflect a later generation than the store's copy; a restore
//! opens the index to write, which replays the store's journal into them (or rebuilds them
//! from the cards when the journal no longer reaches back), and checks the result. An index
//! file that could not be copied consistently (a writer removed it mid-copy, five times) is
//! left out, and the restore makes it from the cards: the store is all a backup needs.

use crate::open::{STORE_FILE, take_lock};
use crate::*;
use serde::{Deserialize, Serialize};
use std::io::Read;

/// The manifest's file name.
pub const MANIFEST: &str = "situate-backup.json";

/// The manifest's format version.
const FORMAT: u32 = 1;

/// How many times a derived index is copied before it is left out.
const ATTEMPTS: usize = 5;

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BackupFile {
    /// Its path inside the backup (`/`-separated).
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its BLAKE3 hash (hex).
    pub blake3: String,
}

/// `situate-backup.json`: what a backup holds.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Manifest {
    /// The manifest's format version (1).
    pub format: u32,
    /// The situate version that wrote it.
    pub situate_version: String,
    /// When it was taken (RFC 3339, UTC).
    pub created_at: String,
    /// The store generation the backup holds.
    pub generation: u64,
    /// The BM25 index copied (its directory), if one could be.
    pub bm25: Option<String>,
    /// The generation the BM25 copy reflects.
    pub bm25_generation: Option<u64>,
    /// The vector snapshot copied (its stem), if the index has one.
    pub vectors: Option<String>,
    /// Every file, with its size and hash.
    pub files: Vec<BackupFile>,
}

/// What [`Engine::backup_at`] wrote: `situate backup --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BackupAnswer {
    /// The backup directory.
    pub backup: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its size in bytes.
    pub bytes: u64,
    /// Seconds taken.
    pub seconds: f64,
}

/// What [`Engine::restore_at`] did: `situate restore --json`.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreAnswer {
    /// The index restored.
    pub index: PathBuf,
    /// The backup it came from.
    pub backup: PathBuf,
    /// The store generation restored.
    pub generation: u64,
    /// Where the index it replaced was moved (kept until you remove it).
    pub replaced: Option<PathBuf>,
    /// The restored index's check (`situate check`).
    pub check: IntegrityAnswer,
    /// Seconds taken.
    pub seconds: f64,
}

fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut f = File::open(path).map_err(io("cannot read", path))?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let got = f.read(&mut buf).map_err(io("cannot read", path))?;
        if got == 0 {
            break;
        }
        n += got as u64;
        h.update(&buf[..got]);
    }
    Ok((n, h.finalize().to_hex().to_string()))
}

/// Every file under `dir`, as `/`-separated paths relative to it, sorted.
fn files_under(dir: &Path) -> Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in std::fs::read_dir(dir).map_err(io("cannot read", dir))? {
            let e = e.map_err(io("cannot read", dir))?;
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out)?;
            } else if let Ok(rel) = p.strip_prefix(root) {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Syncs every file under `dir`, then the directories.
fn sync_tree(dir: &Path) -> Result<()> {
    for rel in files_under(dir)? {
        let p = dir.join(&rel);
        File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(io("cannot sync", &p))?;
        if let Some(parent) = p.parent() {
            sync_dir(parent);
        }
    }
    sync_dir(dir);
    Ok(())
}

/// A sibling of `target` to build in, named so that a listing shows what it is.
fn staging(target: &Path, what: &str) -> Result<PathBuf> {
    let name = target
        .file_name()
        .ok_or_else(|| EngineError::Invalid(format!("{} names no directory", target.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io("cannot create", &parent))?;
    Ok(parent.join(format!(".{name}.{what}-{}", std::process::id())))
}

fn remove_dir(dir: &Path) {
    if dir.exists()
        && let Err(e) = std::fs::remove_dir_all(dir)
    {
        tracing::warn!("could not remove {}: {e}", dir.display());
    }
}

impl Engine {
    /// Writes a backup of the index in `index` to `target` (a directory that must not
    /// exist, or be empty), while searches and an ingest go on: built beside `target` and
    /// renamed into place when complete and checked, so a backup that exists is whole.
    pub fn backup_at(index: &Path, target: &Path) -> Result<BackupAnswer> {
        let started = std::time::Instant::now();
        if !Engine::exists(index) {
            return Err(EngineError::NoIndex(index.to_path_buf()));
        }
        if target.exists() {
            let empty = std::fs::read_dir(target)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
            if !empty {
                return Err(EngineError::InvalidField {
                    field: "dir".into(),
                    reason: format!(
                        "{} exists and is not an empty directory: a backup goes into a new one",
                        target.display()
                    ),
                });
            }
        }
        let partial = staging(target, "partial")?;
        remove_dir(&partial);
        std::fs::create_dir(&partial).map_err(io("cannot create", &partial))?;
        let made = Engine::write_backup(index, &partial);
        let manifest = match made {
            Ok(m) => m,
            Err(e) => {
                remove_dir(&partial);
                return Err(e);
            }
        };
        if target.exists() {
            std::fs::remove_dir(target).map_err(io("cannot replace", target))?;
        }
        std::fs::rename(&partial, target).map_err(io("cannot create", target))?;
        if let Some(parent) = target.parent() {
            sync_dir(parent);
        }
        Ok(BackupAnswer {
            backup: target.to_path_buf(),
            bytes: manifest.files.iter().map(|f| f.bytes).sum(),
            manifest,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn write_backup(index: &Path, out: &Path) -> Result<Manifest> {
        let store = Store::open(&index.join(STORE_FILE))?;
        let chinese = match store.meta("chinese_tokenizer")? {
            Some(c) => c.parse().map_err(EngineError::Invalid)?,
            None => ChineseTokenizer::default(),
        };
        // The derived indexes first: each then reflects at most the store's generation
        // when the store is copied last.
        let mut bm25 = None;
        for attempt in 1..=ATTEMPTS {
            let name = store
                .meta("bm25_dir")?
                .unwrap_or_else(|| "bm25-1".to_string());
            let dst = out.join(&name);
            match Bm25Index::copy_committed(&index.join(&name), &dst, chinese) {
                Ok(generation) => {
                    bm25 = Some((name, generation));
                    break;
                }
                Err(e) => {
                    tracing::warn!("copying the BM25 index, attempt {attempt}: {e}");
                    remove_dir(&dst);
                }
            }
        }
        let backend = match store.meta("vector_index")? {
            Some(b) => b.parse().map_err(EngineError::Invalid)?,
            None => Backend::Auto,
        };
        let mut vectors = None;
        for attempt in 1..=ATTEMPTS {
            let Some(stem) = store.meta("vector_file")? else {
                break;
            };
            let copied = Vectors::files(index, &stem).iter().try_for_each(|f| {
                let to = out.join(f.file_name().unwrap_or_default());
                std::fs::copy(f, &to)
                    .map(|_| ())
                    .map_err(io("cannot copy", f))
            });
            let checked = copied.and_then(|()| {
                Vectors::load(out, &stem, backend, true)
                    .map(|_| ())
                    .map_err(EngineError::from)
            });
            match checked {
                Ok(()) if !Vectors::files(out, &stem).is_empty() => {
                    vectors = Some(stem);
                    break;
                }
                Ok(()) => {}
                Err(e) => tracing::warn!("copying the vector snapshot, attempt {attempt}: {e}"),
            }
            Vectors::remove_stale(out, None);
        }
        store.copy_to(&out.join(STORE_FILE))?;
        drop(store);
        let copy = Store::open(&out.join(STORE_FILE))?;
        match &bm25 {
            Some((name, _)) => copy.set_meta("bm25_dir", name)?,
            // Left out: the restore makes it from the cards.
            None => copy.set_meta("bm25_dir", "bm25-1")?,
        }
        match &vectors {
            Some(stem) => copy.set_meta("vector_file", stem)?,
            None => copy.remove_meta("vector_file")?,
        }
        let found = copy.verify(false)?;
        if let Some(first) = found.first() {
            return Err(EngineError::Damaged {
                what: "the store's copy".into(),
                found: first.clone(),
                fix: "The index's own store may be damaged: run `situate check`.".into(),
            });
        }
        let generation = copy.generation()?;
        drop(copy);
        let mut files = Vec::new();
        for rel in files_under(out)? {
            let (bytes, blake3) = hash_file(&out.join(&rel))?;
            files.push(BackupFile {
                path: rel,
                bytes,
                blake3,
            });
        }
        let manifest = Manifest {
            format: FORMAT,
            situate_version: env!("CARGO_PKG_VERSION").to_string(),
            created_at: situate_core::now_rfc3339(),
            generation,
            bm25_generation: bm25.as_ref().map(|(_, g)| *g),
            bm25: bm25.map(|(n, _)| n),
            vectors,
            files,
        };
        let json = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| EngineError::Internal(format!("cannot write the manifest: {e}")))?;
        let path = out.join(MANIFEST);
        std::fs::write(&path, json).map_err(io("cannot write", &path))?;
        sync_tree(out)?;
        Ok(manifest)
    }

    /// Reads a backup's manifest and checks every file it lists against its size and
    /// hash: an error names the first that differs, and nothing is written.
    pub fn check_backup(backup: &Path) -> Result<Manifest> {
        let path = backup.join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(|e| EngineError::InvalidField {
            field: "backup".into(),
            reason: format!(
                "{} is not a situate backup (cannot read {MANIFEST}: {e})",
                backup.display()
            ),
        })?;
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| EngineError::Damaged {
                what: format!("the backup {}", backup.display()),
                found: format!("{MANIFEST} is not valid: {e}"),
                fix: "Restore from another backup.".into(),
            })?;
        if manifest.format != FORMAT {
            return Err(EngineError::InvalidField {
                field: "backup".into(),
                reason: format!(
                    "{} is a backup of format {}; this version reads format {FORMAT}",
                    backup.display(),
                    manifest.format
                ),
            });
        }
        for f in &manifest.files {
            let damaged = |found: String| EngineError::Damaged {
                what: format!("the backup {}", backup.display()),
                found,
                fix: "Restore from another backup.".into(),
            };
            if f.path.split('/').any(|p| p == ".." || p.is_empty()) {
                return Err(damaged(format!("{MANIFEST} names {:?}", f.path)));
            }
            let p = backup.join(&f.path);
            match hash_file(&p) {
                Ok((bytes, hash)) if bytes == f.bytes && hash == f.blake3 => {}
                Ok(_) => return Err(damaged(format!("{} does not match its hash", f.path))),
                Err(_) => return Err(damaged(format!("{} is missing", f.path))),
            }
        }
        if !manifest.files.iter().any(|f| f.path == STORE_FILE) {
            return Err(EngineError::Damaged {
                what: format!("the backup {}", backup.display()),
                found: format!("it holds no {STORE_FILE}"),
                fix: "Restore from another backup.".into(),
            });
        }
        Ok(manifest)
    }

    /// Restores the backup in `backup` to `index`, after checking every file of it. An
    /// index already at `index` is replaced only with `replace`, and is then moved aside
    /// (`INDEX.replaced-TIME`), not deleted; a writer working on it makes the restore
    /// wait for nothing: it is refused as busy. The restored index is opened to write
    /// (which brings its indexes up to its store) and checked.
    pub fn restore_at(backup: &Path, index: &Path, replace: bool) -> Result<RestoreAnswer> {
        let started = std::time::Instant::now();
        let manifest = Engine::check_backup(backup)?;
        let existing = index.exists()
            && std::fs::read_dir(index)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true);
        if existing && !replace {
            return Err(EngineError::Conflict(format!(
                "{} is not empty; restoring with replace (`situate restore --replace`, `replace=True` in Python) replaces the index there: it is moved aside, not deleted",
                index.display()
            )));
        }
        if existing && !Engine::exists(index) {
            return Err(EngineError::Conflict(format!(
                "{} holds files but no situate index: restore into a new directory",
                index.display()
            )));
        }
        let staged = staging(index, "restoring")?;
        remove_dir(&staged);
        let copied = (|| -> Result<()> {
            for f in &manifest.files {
                let (from, to) = (backup.join(&f.path), staged.join(&f.path));
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
                }
                std::fs::copy(&from, &to).map_err(io("cannot copy", &from))?;
            }
            sync_tree(&staged)
        })();
        if let Err(e) = copied {
            remove_dir(&staged);
            return Err(e);
        }
        let mut replaced = None;
        if existing {
            // No writer may be at work on the index being replaced.
            let lock = match take_lock(index) {
                Ok(l) => l,
                Err(e) => {
                    remove_dir(&staged);
                    return Err(e);
                }
            };
            let stamp = situate_core::now_rfc3339().replace([':', '-'], "");
            let aside = PathBuf::from(format!("{}.replaced-{stamp}", index.display()));
            std::fs::rename(index, &aside).map_err(io("cannot move aside", index))?;
            drop(lock);
            replaced = Some(aside);
        } else if index.exists() {
            std::fs::remove_dir(index).map_err(io("cannot replace", index))?;
        }
        std::fs::rename(&staged, index).map_err(io("cannot create", index))?;
        if let Some(parent) = index.parent() {
            sync_dir(parent);
        }
        // Opening to write replays the journal into the indexes (or rebuilds them).
        drop(Engine::open(index, Access::Write)?);
        let check = Engine::check_at(index, true)?;
        Ok(RestoreAnswer {
            index: index.to_path_buf(),
            backup: backup.to_path_buf(),
            generation: manifest.generation,
            replaced,
            check,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}
