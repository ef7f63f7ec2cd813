//! Opening an index: creating one, opening one to read or to write (the write lock), and
//! the vector index and journals loaded with it.

use crate::*;

impl Engine {
    /// Whether `dir` holds an index.
    pub fn exists(dir: &Path) -> bool {
        dir.join(STORE_FILE).is_file()
    }

    /// Creates an index in `dir` (which may exist and be empty of an index).
    pub fn create(dir: &Path, settings: CreateSettings) -> Result<Engine> {
        situate_core::cpu::check().map_err(EngineError::Invalid)?;
        if Engine::exists(dir) {
            return Err(EngineError::Conflict(format!(
                "an index already exists at {}",
                dir.display()
            )));
        }
        // An embedder no ingest could load is refused before the index exists: it could not
        // be changed afterwards.
        situate_embed::check(&settings.embedder)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        // The store is made under a temporary name with its creation settings, then renamed:
        // a kill before the rename leaves no index (a re-run creates it afresh), never one
        // whose settings are missing.
        let creating = dir.join(format!("{STORE_FILE}.creating"));
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let leftover = PathBuf::from(format!("{}{suffix}", creating.display()));
            match std::fs::remove_file(&leftover) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io("cannot remove", &leftover)(e));
                }
                _ => {}
            }
        }
        let store = Store::open(&creating)?;
        store.set_metas(&[
            ("chinese_tokenizer", settings.chinese.as_str()),
            ("embedder", &settings.embedder),
            ("vector_index", settings.vector_index.as_str()),
        ])?;
        // Closing the only connection checkpoints the write-ahead log into the file.
        drop(store);
        crash_point("index-create");
        let target = dir.join(STORE_FILE);
        std::fs::rename(&creating, &target).map_err(io("cannot create", &target))?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Engine::open(dir, Access::Write)
    }

    /// Opens the index in `dir`. A damaged BM25 index is an error saying so and what to
    /// run; a damaged vector snapshot is reloaded from the embedding cache (a warning).
    pub fn open(dir: &Path, access: Access) -> Result<Engine> {
        Engine::open_with(dir, access, false)
    }

    /// Opens the index in `dir` even when its BM25 index is damaged: an empty index stands
    /// in for it and [`Engine::damage`] says what was found. For the calls that repair or
    /// report ([`Engine::rebuild_at`], [`Engine::check_at`]); nothing is synced into the
    /// stand-in.
    pub fn open_damaged(dir: &Path, access: Access) -> Result<Engine> {
        Engine::open_with(dir, access, true)
    }

    fn open_with(dir: &Path, access: Access, tolerate: bool) -> Result<Engine> {
        // A `SITUATE_CPU` this CPU cannot honour is refused before anything is read.
        situate_core::cpu::check().map_err(EngineError::Invalid)?;
        if !Engine::exists(dir) {
            return Err(EngineError::NoIndex(dir.to_path_buf()));
        }
        let lock = match access {
            Access::Write => Some(take_lock(dir)?),
            Access::Read => None,
        };
        let store = Store::open(&dir.join(STORE_FILE))?;
        let opened_generation = store.generation()?;
        let chinese = match store.meta("chinese_tokenizer")? {
            Some(c) => c.parse().map_err(EngineError::Invalid)?,
            None => ChineseTokenizer::default(),
        };
        let bm25_name = store
            .meta("bm25_dir")?
            .unwrap_or_else(|| "bm25-1".to_string());
        let bm25_path = dir.join(&bm25_name);
        let mut damage = Vec::new();
        let bm25 = match integrity::open_bm25(&bm25_path, chinese)? {
            Ok(bm25) => bm25,
            Err(found) => {
                let d = Damage {
                    part: Part::Bm25,
                    path: bm25_path.clone(),
                    found,
                };
                if !tolerate {
                    return Err(d.error());
                }
                damage.push(d);
                Bm25Index::in_memory(chinese)?
            }
        };
        let bm25_damaged = !damage.is_empty();
        let languages = store.languages()?;
        let vector_backend = match store.meta("vector_index")? {
            Some(b) => b.parse().map_err(EngineError::Invalid)?,
            None => Backend::Auto,
        };
        let mut engine = Engine {
            dir: dir.to_path_buf(),
            store,
            bm25,
            chinese,
            languages,
            embedder: OnceLock::new(),
            vectors_spec: None,
            vectors_model: None,
            vectors: None,
            vector_gen: 0,
            vector_saved: None,
            vector_backend,
            rerankers: Default::default(),
            answer_models: Default::default(),
            opened: (opened_generation, bm25_name.clone()),
            cancel: None,
            damage,
            _lock: lock,
        };
        engine.load_vectors()?;
        if bm25_damaged {
            // Nothing is synced into the stand-in: the rebuild makes every index anew.
        } else if engine._lock.is_some() {
            engine.remove_stale_index_dirs(&bm25_name);
            engine.sync_index()?;
            engine.save_vectors()?;
        } else if engine.index_is_behind()? {
            // A crashed writer left the index behind; catch up if nobody is writing now.
            if let Ok(lock) = take_lock(dir) {
                engine._lock = Some(lock);
                let caught = engine.sync_index().and_then(|()| engine.save_vectors());
                engine.bm25.close_writer();
                engine._lock = None;
                match caught {
                    Ok(()) => {}
                    // A reader that cannot write (a full disk) answers from the indexes as
                    // they are (BM25 as of its last commit, the vectors caught up in
                    // memory) rather than fail: the catch-up is the next writer's, once
                    // there is space. A damaged store is said, never worked around.
                    Err(e) if e.kind() != ErrorKind::Damaged => {
                        tracing::warn!(
                            "cannot catch the index up ({e}); answering from the indexes as they are"
                        );
                        engine.bm25 = Bm25Index::open(&bm25_path, chinese)?;
                        engine.sync_vectors()?;
                        engine.opened.0 = engine.opened.0.min(engine.bm25.generation()?);
                    }
                    Err(e) => return Err(e),
                }
            } else {
                // A writer is busy: catch the vectors up in memory only. BM25 stays as
                // loaded: the engine counts as of BM25's generation, so `is_stale` sends
                // its reader to reopen once the writer has committed BM25 too (a reader
                // opened between a writer's store commit and its BM25 commit would
                // otherwise keep the older BM25 view).
                engine.sync_vectors()?;
                engine.opened.0 = engine.opened.0.min(engine.bm25.generation()?);
            }
        }
        Ok(engine)
    }

    /// Loads the vector snapshot (if the index has vectors): memory-mapped when it is
    /// current and this engine only reads, so a search touches only the pages it needs.
    pub(crate) fn load_vectors(&mut self) -> Result<()> {
        // The embedder's settings and the snapshot that goes with them, read at once: a
        // switch of embedder (`reembed`) changes them together.
        let (s, mut also) = self.embed_settings_with(&["vector_file", "generation"])?;
        let (Some(model), Some(_)) = (s.model, s.dim) else {
            return Ok(());
        };
        self.vectors_spec = Some(s.spec);
        self.vectors_model = Some(model);
        let store_gen: u64 = also
            .remove("generation")
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        let snapshot = also.remove("vector_file");
        let gen_of = |stem: &str| stem.trim_start_matches("vectors-").parse::<u64>().ok();
        match snapshot
            .as_deref()
            .and_then(|st| gen_of(st).map(|g| (st, g)))
        {
            Some((stem, g)) => {
                let view = self._lock.is_none() && g == store_gen;
                match Vectors::load(&self.dir, stem, self.vector_backend, view) {
                    Ok(v) => {
                        self.vectors = Some(v);
                        self.vector_gen = g;
                        self.vector_saved = Some(g);
                    }
                    Err(e) => {
                        tracing::warn!("{e}; reloading the vectors from the embedding cache");
                        self.damage.push(Damage {
                            part: Part::Vectors,
                            path: self.dir.join(stem),
                            found: vec![e.to_string()],
                        });
                        self.reload_vectors()?;
                    }
                }
            }
            None => self.reload_vectors()?,
        }
        Ok(())
    }

    pub(crate) fn journal_trimmed_to(&self) -> Result<u64> {
        Ok(self
            .store
            .meta("journal_trimmed_to")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// Trims the journal up to the oldest generation any saved index reflects.
    pub(crate) fn trim_journal(&mut self) -> Result<()> {
        let mut upto = self.bm25.generation()?;
        if self.vectors.is_some() {
            upto = upto.min(self.vector_saved.unwrap_or(0));
        }
        if upto > self.journal_trimmed_to()? {
            self.store.trim_journal(upto)?;
            self.store
                .set_meta("journal_trimmed_to", &upto.to_string())?;
        }
        Ok(())
    }

    /// Opens the index, creating it with `settings` if there is none.
    pub fn open_or_create(dir: &Path, settings: CreateSettings) -> Result<Engine> {
        if Engine::exists(dir) {
            Engine::open(dir, Access::Write)
        } else {
            Engine::create(dir, settings)
        }
    }
}

pub(crate) fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join("write.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("cannot open", &path))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(EngineError::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(EngineError::Io {
            op: "cannot lock",
            path,
            source: e,
        }),
    }
}

pub(crate) const STORE_FILE: &str = "cards.db";
