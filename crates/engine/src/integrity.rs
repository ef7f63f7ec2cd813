//! Checking an index's files ([`Engine::check_at`], [`Engine::verify`]) and what is done
//! about a damaged one.
//!
//! Each part is checked by the means it has: the card store by SQLite's own
//! `integrity_check` (or `quick_check`) and `foreign_key_check`; the BM25 index by the
//! checksum tantivy writes at the end of every segment file (checked on every open, so a
//! flipped byte is never read as a score); the vector snapshot by its BLAKE3 checksum
//! (checked on every load). The parts are told apart because their fixes differ: BM25 and
//! the vectors are derived from the cards and are remade by `situate rebuild` with no LLM
//! call; the store is the source of truth, and is never "repaired" from itself.

use crate::open::STORE_FILE;
use crate::*;
use serde::Serialize;

/// A part of an index directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// The card store (`cards.db`): the source of truth.
    Store,
    /// The BM25 index (`bm25-N/`), derived from the cards.
    Bm25,
    /// The vector snapshot (`vectors-G.*`), derived from the embedding cache.
    Vectors,
}

/// A damaged part found on opening an index.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Damage {
    /// Which part.
    pub part: Part,
    /// Its file or directory.
    pub path: PathBuf,
    /// What was found (one line per damaged file). A damaged vector snapshot is always
    /// reloaded from the embedding cache into memory; a damaged BM25 index has an empty
    /// stand-in ([`Engine::open_damaged`]).
    pub found: Vec<String>,
}

impl Damage {
    fn what(&self) -> String {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match self.part {
            Part::Store => "the card store (cards.db)".to_string(),
            Part::Bm25 => format!("the BM25 index ({name})"),
            Part::Vectors => format!("the vector snapshot ({name})"),
        }
    }

    /// The error that says this part is damaged and what to do.
    pub(crate) fn error(&self) -> EngineError {
        EngineError::Damaged {
            what: self.what(),
            found: summary(&self.found),
            fix: fix_for(self.part).to_string(),
        }
    }
}

fn fix_for(part: Part) -> &'static str {
    match part {
        Part::Store => crate::STORE_FIX,
        Part::Bm25 | Part::Vectors => crate::REBUILD_FIX,
    }
}

fn summary(found: &[String]) -> String {
    match found {
        [] => "(nothing said)".to_string(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// Opens the BM25 index at `path` and checks its files: `Ok(Err(found))` when it is
/// damaged (a file fails its checksum or is missing, or tantivy cannot open it). An index
/// that does not exist yet is made empty (the engine then catches it up from the cards).
///
/// A writer committing meanwhile (another process's ingest, the service's job, a query
/// node's follower) deletes the segments it merged away, so a reader may find a file gone
/// that the list it read still named: that is no damage, and `meta.json` has changed by
/// then. So a finding counts only when `meta.json` is the same before and after; otherwise
/// the index is read again. (Seen once in 80,580 requests of `bench/soak.sh`: one search
/// failed as "damaged" while an ingest job committed.)
pub(crate) fn open_bm25(
    path: &Path,
    chinese: ChineseTokenizer,
) -> Result<std::result::Result<Bm25Index, Vec<String>>> {
    const TRIES: usize = 5;
    let meta = || std::fs::read(path.join("meta.json")).ok();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let before = meta();
        let found = match Bm25Index::open(path, chinese) {
            Ok(bm25) => match bm25.verify() {
                Ok(found) if found.is_empty() => return Ok(Ok(bm25)),
                Ok(found) => found,
                Err(e) => vec![e.to_string()],
            },
            Err(e) if before.is_none() => return Err(e.into()),
            Err(e) => vec![e.to_string()],
        };
        if attempt >= TRIES || meta() == before {
            return Ok(Err(found));
        }
    }
}

/// The state of one part after [`Engine::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PartState {
    /// Every check passed.
    Ok,
    /// A check failed: `found` says what.
    Damaged,
    /// The file on disk is damaged, and the engine reloaded the part from the store
    /// (vectors from the embedding cache) into memory; a rebuild rewrites the file.
    Reloaded,
    /// The index has no such part (no embedder, so no vectors).
    Absent,
    /// Not checked: an earlier part is damaged so that this one could not be read.
    NotChecked,
}

/// One part's result in an [`IntegrityAnswer`].
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PartCheck {
    /// What the checks found.
    pub state: PartState,
    /// The file or directory checked.
    pub path: Option<PathBuf>,
    /// What failed (one line each, up to 20).
    pub found: Vec<String>,
}

impl PartCheck {
    fn of(path: PathBuf, found: Vec<String>) -> PartCheck {
        PartCheck {
            state: if found.is_empty() {
                PartState::Ok
            } else {
                PartState::Damaged
            },
            path: Some(path),
            found,
        }
    }

    fn unchecked() -> PartCheck {
        PartCheck {
            state: PartState::NotChecked,
            path: None,
            found: Vec::new(),
        }
    }

    fn sound(&self) -> bool {
        matches!(self.state, PartState::Ok | PartState::Absent)
    }
}

/// What `situate check` (and `stats --verify`) found: every file checked, then the cards
/// compared with the indexes.
#[derive(Debug, Clone, Serialize)]
pub struct IntegrityAnswer {
    /// The index directory.
    pub index: PathBuf,
    /// Whether the store had SQLite's full `integrity_check` (else `quick_check`).
    pub full: bool,
    /// The card store.
    pub store: PartCheck,
    /// The BM25 index.
    pub bm25: PartCheck,
    /// The vector snapshot.
    pub vectors: PartCheck,
    /// The store's cards against the indexes, when the files are sound enough to compare.
    pub consistency: Option<crate::Consistency>,
    /// Whether every file is sound and the indexes hold exactly the store's cards.
    pub healthy: bool,
    /// What to do when not healthy.
    pub fix: Option<String>,
}

impl IntegrityAnswer {
    fn settle(mut self) -> IntegrityAnswer {
        let consistent = self.consistency.as_ref().is_some_and(|c| c.is_consistent());
        self.healthy =
            self.store.sound() && self.bm25.sound() && self.vectors.sound() && consistent;
        self.fix = if !self.store.sound() {
            Some(crate::STORE_FIX.to_string())
        } else if self.healthy {
            None
        } else {
            Some(
                "Run `situate rebuild`: every index is derived from the cards and is made again from the store with no LLM call (vectors from the embedding cache; cards not yet embedded are embedded)."
                    .to_string(),
            )
        };
        self
    }
}

impl Engine {
    /// What opening this engine found damaged ([`Engine::open_damaged`]) or reloaded.
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// Checks every file of the index in `dir` and compares the cards with the indexes:
    /// `situate check`. A store too damaged to open is reported, not returned as an error.
    pub fn check_at(dir: &Path, full: bool) -> Result<IntegrityAnswer> {
        match Engine::open_damaged(dir, Access::Read) {
            Ok(engine) => engine.verify(full),
            Err(e) if e.kind() == ErrorKind::Damaged => Ok(IntegrityAnswer {
                index: dir.to_path_buf(),
                full,
                store: PartCheck::of(dir.join(STORE_FILE), vec![e.to_string()]),
                bm25: PartCheck::unchecked(),
                vectors: PartCheck::unchecked(),
                consistency: None,
                healthy: false,
                fix: None,
            }
            .settle()),
            Err(e) => Err(e),
        }
    }

    /// Checks every file of this index (the store with SQLite's `integrity_check` when
    /// `full`, else `quick_check`; BM25's and the vector snapshot's checksums), then, when
    /// they are sound, compares the cards with the indexes ([`Engine::check`]).
    pub fn verify(&self, full: bool) -> Result<IntegrityAnswer> {
        let store_found = self
            .store
            .verify(full)
            .unwrap_or_else(|e| vec![e.to_string()]);
        let mut store = PartCheck::of(self.dir.join(STORE_FILE), store_found);
        let bm25_dir = self.dir.join(&self.opened.1);
        let bm25 = match self.damage.iter().find(|d| d.part == Part::Bm25) {
            Some(d) => PartCheck::of(d.path.clone(), d.found.clone()),
            None => PartCheck::of(
                bm25_dir,
                self.bm25.verify().unwrap_or_else(|e| vec![e.to_string()]),
            ),
        };
        let vectors = self.verify_vectors()?;
        let mut consistency = None;
        if store.sound() && bm25.sound() {
            match self.check() {
                Ok(c) => consistency = Some(c),
                Err(e) if e.kind() == ErrorKind::Damaged => {
                    store = PartCheck::of(self.dir.join(STORE_FILE), vec![e.to_string()]);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(IntegrityAnswer {
            index: self.dir.clone(),
            full,
            store,
            bm25,
            vectors,
            consistency,
            healthy: false,
            fix: None,
        }
        .settle())
    }

    fn verify_vectors(&self) -> Result<PartCheck> {
        if let Some(d) = self.damage.iter().find(|d| d.part == Part::Vectors) {
            return Ok(PartCheck {
                state: PartState::Reloaded,
                path: Some(d.path.clone()),
                found: d.found.clone(),
            });
        }
        if self.vectors.is_none() {
            return Ok(PartCheck {
                state: PartState::Absent,
                path: None,
                found: Vec::new(),
            });
        }
        let Some(stem) = self.store.meta("vector_file")? else {
            // Held in memory only (reloaded from the cache; the next write saves them).
            return Ok(PartCheck {
                state: PartState::Ok,
                path: None,
                found: Vec::new(),
            });
        };
        let found = match Vectors::load(&self.dir, &stem, self.vector_backend, true) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e.to_string()],
        };
        Ok(PartCheck::of(self.dir.join(stem), found))
    }

    /// Opens the index in `dir` to write, even with a damaged BM25 index, and rebuilds
    /// every index from the cards ([`Engine::rebuild`]): `situate rebuild`, a rebuild job.
    pub fn rebuild_at(dir: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<RebuildReport> {
        let mut engine = Engine::open_damaged(dir, Access::Write)?;
        engine.rebuild(progress)
    }

    /// Refuses to go on when SQLite's quick check finds the store damaged: a rebuild would
    /// make every index from damaged cards.
    pub(crate) fn require_sound_store(&self) -> Result<()> {
        let found = self.store.verify(false)?;
        if found.is_empty() {
            return Ok(());
        }
        Err(Damage {
            part: Part::Store,
            path: self.dir.join(STORE_FILE),
            found,
        }
        .error())
    }
}

/// What [`Engine::salvage_at`] did: `situate salvage --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SalvageAnswer {
    /// The damaged index read.
    pub from: PathBuf,
    /// The new index written.
    pub index: PathBuf,
    /// What was copied, and what could not be read.
    pub salvaged: situate_store::Salvaged,
    /// What to do next.
    pub next: String,
}

impl Engine {
    /// Makes a new index at `into` with the damaged index's settings (in `from`) and
    /// copies into it what can still be read of the damaged store's context cache and
    /// embedding cache: ingesting the same documents into the new index with the same
    /// settings then takes every salvaged context and vector from there, with no model
    /// call. The damaged index is only read.
    pub fn salvage_at(from: &Path, into: &Path) -> Result<SalvageAnswer> {
        if !Engine::exists(from) {
            return Err(EngineError::NoIndex(from.to_path_buf()));
        }
        if Engine::exists(into) {
            return Err(EngineError::Conflict(format!(
                "an index already exists at {}: salvage into a new directory",
                into.display()
            )));
        }
        // The settings first (read-only), so the new index is made as the old one was.
        let found = Store::salvage_settings(&from.join(STORE_FILE))?;
        let get = |k: &str| {
            found
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let settings = CreateSettings {
            chinese: match get("chinese_tokenizer") {
                Some(c) => c.parse().map_err(EngineError::Invalid)?,
                None => ChineseTokenizer::default(),
            },
            embedder: get("embedder").unwrap_or_else(|| "auto".into()),
            vector_index: match get("vector_index") {
                Some(b) => b.parse().map_err(EngineError::Invalid)?,
                None => Backend::Auto,
            },
        };
        let engine = Engine::create(into, settings)?;
        let salvaged = engine.store.salvage_from(&from.join(STORE_FILE))?;
        // The embedder as chosen and the chunk size: an ingest then cuts and embeds as the
        // damaged index did, so the cached contexts and vectors match.
        let keep: Vec<(&str, &str)> = salvaged
            .settings
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "embed_model" | "embed_dim" | "chunk_tokens"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if !keep.is_empty() {
            engine.store.set_metas(&keep)?;
        }
        Ok(SalvageAnswer {
            from: from.to_path_buf(),
            index: into.to_path_buf(),
            next: format!(
                "Ingest the same documents into {} with the same settings (`situate --index {} ingest ...`, the same --context and --llm): the salvaged contexts and vectors are taken from its caches, with no model call; then `situate check`",
                into.display(),
                into.display()
            ),
            salvaged,
        })
    }
}
