//! The vector leg of situate: chunk embeddings searched by cosine similarity.
//!
//! [`Vectors`] holds one index directory's vectors and picks its backend by size: an exact
//! [`FlatIndex`] (every vector scored; exact, and fast enough below
//! [`DEFAULT_ANN_THRESHOLD`] vectors) or an [`HnswIndex`] (usearch) above it. Both apply a
//! metadata filter ([`CardSet`]) inside the search, so `k` filtered hits come back however
//! selective the filter.
//!
//! # Persistence
//!
//! [`Vectors::save`] writes a snapshot named after the store generation it reflects
//! (`vectors-G.flat`, or `vectors-G.hnsw` + `vectors-G.keys`) to temporary names, syncs them
//! and renames them into place; the engine then switches to it with one store write (its
//! `vector_file` setting), exactly as BM25 rebuilds switch. A crash at any point leaves the
//! previous snapshot current; the store's journal brings a loaded snapshot up to date.
//! Every file ends with a blake3 checksum of its content (usearch's graph file is covered
//! by the checksum of the key file, which records its length and hash).
#![warn(missing_docs)]

mod flat;
mod hnsw;

pub use flat::{FlatIndex, dot};
pub use hnsw::{EXPANSION_SEARCH, HnswIndex};

use situate_core::{CardSet, IndexError, IndexHit, VectorIndex, VectorQuery};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Above this many vectors the index switches to HNSW (and back below half of it).
/// Measured (BENCHMARKS.md, `situate bench vectors`): exact top-150 over 20k 384-dimensional
/// vectors takes 1.5 ms on one core here, HNSW 2.4 ms at recall 0.98; exact search grows
/// linearly (21 ms at 100k: it streams every vector from memory), so HNSW pays off past a
/// few tens of thousands.
pub const DEFAULT_ANN_THRESHOLD: usize = 50_000;

/// Vector index errors.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    /// A vector of the wrong length.
    #[error("vector of {got} dimensions where the index has {expected}")]
    Dimension {
        /// The index's dimension.
        expected: usize,
        /// The vector's.
        got: usize,
    },
    /// The ANN library failed.
    #[error("HNSW index: {0}")]
    Ann(String),
    /// A snapshot is damaged or of another format.
    #[error("vector index: {0} (run `situate rebuild` to recreate it from the store)")]
    Corrupt(String),
    /// A file operation failed.
    #[error("vector index: {op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VectorError + 'a {
    move |source| VectorError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Exact below the threshold, HNSW above it.
    #[default]
    Auto,
    /// Always exact.
    Exact,
    /// Always HNSW.
    Hnsw,
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Backend::Auto),
            "exact" => Ok(Backend::Exact),
            "hnsw" => Ok(Backend::Hnsw),
            _ => Err(format!(
                "unknown vector index {s:?}: expected auto, exact or hnsw"
            )),
        }
    }
}

impl Backend {
    /// The name (`auto`, `exact`, `hnsw`).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Exact => "exact",
            Backend::Hnsw => "hnsw",
        }
    }
}

/// Keeps the best `limit` (key, score) pairs; ties go to the smaller key.
pub(crate) struct Candidates {
    limit: usize,
    heap: BinaryHeap<Worst>,
}

#[derive(PartialEq)]
struct Worst(f32, u64);
impl Eq for Worst {}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> Ordering {
        // "Greater" = worse, so the heap's top is the worst kept.
        o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
    }
}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Candidates {
    pub(crate) fn new(limit: usize) -> Self {
        Candidates {
            limit,
            heap: BinaryHeap::with_capacity(limit + 1),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, key: u64, score: f32) {
        if self.limit == 0 {
            return;
        }
        if self.heap.len() == self.limit {
            match self.heap.peek() {
                Some(w) if score < w.0 || (score == w.0 && key > w.1) => return,
                _ => {}
            }
        }
        self.heap.push(Worst(score, key));
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
    }

    pub(crate) fn into_sorted(self) -> Vec<IndexHit> {
        let mut v = self.heap.into_vec();
        v.sort();
        v.into_iter()
            .map(|Worst(score, card)| IndexHit { card, score })
            .collect()
    }
}

enum Inner {
    Exact(FlatIndex),
    Hnsw(HnswIndex),
}

/// One index directory's vectors, exact or HNSW by size.
pub struct Vectors {
    inner: Inner,
    backend: Backend,
    threshold: usize,
}

impl Vectors {
    /// An empty index of `dim` dimensions.
    pub fn new(dim: usize, backend: Backend) -> Result<Self, VectorError> {
        let mut v = Vectors {
            inner: Inner::Exact(FlatIndex::new(dim)),
            backend,
            threshold: DEFAULT_ANN_THRESHOLD,
        };
        v.rebalance()?;
        Ok(v)
    }

    /// Changes the backend policy (and switches if needed).
    pub fn set_backend(&mut self, backend: Backend) -> Result<(), VectorError> {
        self.backend = backend;
        self.rebalance()
    }

    /// Changes the size above which HNSW is used (for tests and benchmarks).
    pub fn set_threshold(&mut self, threshold: usize) -> Result<(), VectorError> {
        self.threshold = threshold;
        self.rebalance()
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        match &self.inner {
            Inner::Exact(f) => f.dim(),
            Inner::Hnsw(h) => h.dim(),
        }
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Exact(f) => f.len(),
            Inner::Hnsw(h) => h.len(),
        }
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `exact` or `hnsw`: the backend in use now.
    pub fn kind(&self) -> &'static str {
        match &self.inner {
            Inner::Exact(_) => "exact",
            Inner::Hnsw(_) => "hnsw",
        }
    }

    /// The keys held, ascending.
    pub fn keys(&self) -> Vec<u64> {
        let mut k: Vec<u64> = match &self.inner {
            Inner::Exact(f) => f.keys().to_vec(),
            Inner::Hnsw(h) => h.keys().collect(),
        };
        k.sort_unstable();
        k
    }

    /// Adds (or replaces) `key`'s vector. Call [`Vectors::rebalance`] after a batch of
    /// changes.
    pub fn add(&mut self, key: u64, v: &[f32]) -> Result<(), VectorError> {
        match &mut self.inner {
            Inner::Exact(f) => f.add(key, v),
            Inner::Hnsw(h) => h.add(key, v),
        }
    }

    /// Adds (or replaces) many vectors; an HNSW graph inserts them concurrently
    /// ([`HnswIndex::add_batch`]). A key given twice keeps its last vector. Call
    /// [`Vectors::rebalance`] after.
    pub fn add_batch(&mut self, items: &[(u64, &[f32])]) -> Result<(), VectorError> {
        match &mut self.inner {
            Inner::Exact(f) => items.iter().try_for_each(|(k, v)| f.add(*k, v)),
            Inner::Hnsw(h) => h.add_batch(items),
        }
    }

    /// Removes `key`; `false` when absent.
    pub fn remove(&mut self, key: u64) -> Result<bool, VectorError> {
        match &mut self.inner {
            Inner::Exact(f) => Ok(f.remove(key)),
            Inner::Hnsw(h) => h.remove(key),
        }
    }

    /// Switches backend if the size crossed the threshold (exact → HNSW above it, back
    /// below half of it, so an index near the threshold does not flip on every batch).
    pub fn rebalance(&mut self) -> Result<(), VectorError> {
        let want_hnsw = match self.backend {
            Backend::Exact => false,
            Backend::Hnsw => true,
            Backend::Auto => match &self.inner {
                Inner::Exact(f) => f.len() > self.threshold,
                Inner::Hnsw(h) => h.len() >= self.threshold / 2,
            },
        };
        match (&self.inner, want_hnsw) {
            (Inner::Exact(f), true) => {
                let mut h = HnswIndex::new(f.dim())?;
                let items: Vec<(u64, &[f32])> = f.iter().collect();
                h.add_batch(&items)?;
                self.inner = Inner::Hnsw(h);
            }
            (Inner::Hnsw(h), false) => {
                let mut f = FlatIndex::new(h.dim());
                let mut keys: Vec<u64> = h.keys().collect();
                keys.sort_unstable();
                for k in keys {
                    if let Some(v) = h.get(k) {
                        f.add(k, &v)?;
                    }
                }
                self.inner = Inner::Exact(f);
            }
            _ => {}
        }
        Ok(())
    }

    /// Every vector of the index in an exact (flat) index: the ground truth against which an
    /// HNSW index's recall is measured (`situate-bench hybrid`). Reads every vector, so it
    /// costs the index's size in memory.
    pub fn exact_copy(&self) -> Result<FlatIndex, VectorError> {
        match &self.inner {
            Inner::Exact(f) => Ok(f.clone()),
            Inner::Hnsw(h) => {
                let mut f = FlatIndex::new(h.dim());
                for key in h.keys() {
                    if let Some(v) = h.get(key) {
                        f.add(key, &v)?;
                    }
                }
                Ok(f)
            }
        }
    }

    /// Sets the HNSW search effort (ef); exact search ignores it.
    pub fn set_search_effort(&self, ef: usize) {
        if let Inner::Hnsw(h) = &self.inner {
            h.set_search_effort(ef);
        }
    }

    /// The best hits for `query`, best first.
    pub fn search_vec(
        &self,
        query: &[f32],
        limit: usize,
        filter: Option<&CardSet>,
    ) -> Result<Vec<IndexHit>, VectorError> {
        if query.len() != self.dim() {
            return Err(VectorError::Dimension {
                expected: self.dim(),
                got: query.len(),
            });
        }
        match &self.inner {
            Inner::Exact(f) => Ok(f.search(query, limit, filter)),
            Inner::Hnsw(h) => h.search(query, limit, filter),
        }
    }

    /// Writes a snapshot for `generation` into `dir` (atomically: temporary names, synced,
    /// renamed) and returns its name, to be recorded by the caller.
    pub fn save(&self, dir: &Path, generation: u64) -> Result<String, VectorError> {
        let stem = format!("vectors-{generation}");
        match &self.inner {
            Inner::Exact(f) => {
                let path = dir.join(format!("{stem}.flat"));
                write_atomic(&path, |w| {
                    write_header(w, b"SITVFLT1", f.dim(), f.len())?;
                    for k in f.keys() {
                        w.write_all(&k.to_le_bytes())?;
                    }
                    for (_, v) in f.iter() {
                        for x in v {
                            w.write_all(&x.to_le_bytes())?;
                        }
                    }
                    Ok(())
                })?;
            }
            Inner::Hnsw(h) => {
                let graph = dir.join(format!("{stem}.hnsw"));
                let tmp = tmp_name(&graph);
                h.save(&tmp)?;
                let graph_hash = hash_file(&tmp)?;
                sync_file(&tmp)?;
                let mut keys: Vec<u64> = h.keys().collect();
                keys.sort_unstable();
                write_atomic(&dir.join(format!("{stem}.keys")), |w| {
                    write_header(w, b"SITVHNS1", h.dim(), keys.len())?;
                    w.write_all(graph_hash.as_bytes())?;
                    for k in &keys {
                        w.write_all(&k.to_le_bytes())?;
                    }
                    Ok(())
                })?;
                std::fs::rename(&tmp, &graph).map_err(io("cannot rename", &graph))?;
                sync_dir(dir);
            }
        }
        Ok(stem)
    }

    /// Loads the snapshot `stem` from `dir`. With `view`, an HNSW graph is memory-mapped
    /// read-only (the least memory for searching); it is loaded for real by the first
    /// change.
    pub fn load(dir: &Path, stem: &str, backend: Backend, view: bool) -> Result<Self, VectorError> {
        let flat = dir.join(format!("{stem}.flat"));
        let inner = if flat.is_file() {
            let bytes = read_checked(&flat)?;
            let (dim, n, mut rest) = read_header(&flat, &bytes, b"SITVFLT1")?;
            // Checked: a header's count can be anything (a file sealed elsewhere, or a
            // backup from elsewhere, passes its checksum whatever it holds).
            if n.checked_mul(8 + dim * 4) != Some(rest.len()) {
                return Err(VectorError::Corrupt(format!(
                    "{}: wrong size",
                    flat.display()
                )));
            }
            let mut f = FlatIndex::new(dim);
            let (keys, data) = rest.split_at(n * 8);
            rest = data;
            let mut v = vec![0f32; dim];
            for (i, k) in keys.chunks_exact(8).enumerate() {
                let row = &rest[i * dim * 4..(i + 1) * dim * 4];
                for (x, b) in v.iter_mut().zip(row.chunks_exact(4)) {
                    *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                f.add(u64::from_le_bytes(k.try_into().unwrap_or([0; 8])), &v)?;
            }
            Inner::Exact(f)
        } else {
            let keys_path = dir.join(format!("{stem}.keys"));
            let graph = dir.join(format!("{stem}.hnsw"));
            let bytes = read_checked(&keys_path)?;
            let (_, n, rest) = read_header(&keys_path, &bytes, b"SITVHNS1")?;
            if n.checked_mul(8).and_then(|k| k.checked_add(64)) != Some(rest.len()) {
                return Err(VectorError::Corrupt(format!(
                    "{}: wrong size",
                    keys_path.display()
                )));
            }
            let (want, keys) = rest.split_at(64);
            if hash_file(&graph)?.as_bytes() != want {
                return Err(VectorError::Corrupt(format!(
                    "{}: checksum mismatch",
                    graph.display()
                )));
            }
            let keys: Vec<u64> = keys
                .chunks_exact(8)
                .map(|k| u64::from_le_bytes(k.try_into().unwrap_or([0; 8])))
                .collect();
            Inner::Hnsw(HnswIndex::load(&graph, keys, view)?)
        };
        Ok(Vectors {
            inner,
            backend,
            threshold: DEFAULT_ANN_THRESHOLD,
        })
    }

    /// The files of the snapshot `stem` in `dir` that exist (`.flat`, or `.keys` and
    /// `.hnsw`): what a backup copies.
    pub fn files(dir: &Path, stem: &str) -> Vec<std::path::PathBuf> {
        ["flat", "keys", "hnsw"]
            .iter()
            .map(|ext| dir.join(format!("{stem}.{ext}")))
            .filter(|p| p.is_file())
            .collect()
    }

    /// Removes snapshot files in `dir` other than `keep`'s (leftovers of older snapshots
    /// or of an interrupted save).
    pub fn remove_stale(dir: &Path, keep: Option<&str>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("vectors-") {
                continue;
            }
            let stem = name.split('.').next().unwrap_or("");
            if Some(stem) != keep || name.ends_with(".tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl VectorIndex for Vectors {
    fn search(&self, q: &VectorQuery<'_>) -> Result<Vec<IndexHit>, IndexError> {
        Ok(self.search_vec(q.vector, q.limit, q.filter)?)
    }

    fn len(&self) -> usize {
        Vectors::len(self)
    }
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

fn write_header(w: &mut dyn Write, magic: &[u8; 8], dim: usize, n: usize) -> std::io::Result<()> {
    w.write_all(magic)?;
    w.write_all(&(dim as u32).to_le_bytes())?;
    w.write_all(&(n as u64).to_le_bytes())
}

/// The largest dimension a snapshot may record: far above any embedder's (3,072 for the
/// largest hosted ones), so that a header claiming more is damage, not a 16 GiB allocation.
const MAX_DIM: usize = 1 << 16;

/// A snapshot file's header (magic, dimension, count) and what follows it.
fn read_header<'a>(
    path: &Path,
    bytes: &'a [u8],
    magic: &[u8; 8],
) -> Result<(usize, usize, &'a [u8]), VectorError> {
    if bytes.len() < 20 || &bytes[..8] != magic {
        return Err(VectorError::Corrupt(format!(
            "{} is not a situate vector file of this version",
            path.display()
        )));
    }
    let dim = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if dim > MAX_DIM {
        return Err(VectorError::Corrupt(format!(
            "{}: its header records {dim} dimensions (at most {MAX_DIM})",
            path.display()
        )));
    }
    let n = u64::from_le_bytes(bytes[12..20].try_into().unwrap_or([0; 8]));
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    Ok((dim, n, &bytes[20..]))
}

/// Writes `path` through a temporary file with a trailing blake3 checksum, syncs, renames.
fn write_atomic(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), VectorError> {
    struct Hashing<W: Write> {
        inner: W,
        hasher: blake3::Hasher,
    }
    impl<W: Write> Write for Hashing<W> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.hasher.update(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }
    let tmp = tmp_name(path);
    let file = std::fs::File::create(&tmp).map_err(io("cannot create", &tmp))?;
    let mut w = Hashing {
        inner: BufWriter::with_capacity(1 << 20, file),
        hasher: blake3::Hasher::new(),
    };
    body(&mut w).map_err(io("cannot write", &tmp))?;
    let sum = w.hasher.finalize();
    let mut inner = w.inner;
    inner
        .write_all(sum.as_bytes())
        .map_err(io("cannot write", &tmp))?;
    let file = inner.into_inner().map_err(|e| VectorError::Io {
        op: "cannot write",
        path: tmp.clone(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(io("cannot sync", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io("cannot rename", path))?;
    if let Some(d) = path.parent() {
        sync_dir(d);
    }
    Ok(())
}

/// Reads a file written by [`write_atomic`] and checks its checksum; returns the content.
fn read_checked(path: &Path) -> Result<Vec<u8>, VectorError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io("cannot read", path))?;
    if bytes.len() < 32 {
        return Err(VectorError::Corrupt(format!(
            "{} is truncated",
            path.display()
        )));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if blake3::hash(body).as_bytes() != sum {
        return Err(VectorError::Corrupt(format!(
            "{}: checksum mismatch",
            path.display()
        )));
    }
    bytes.truncate(bytes.len() - 32);
    Ok(bytes)
}

fn hash_file(path: &Path) -> Result<String, VectorError> {
    let mut h = blake3::Hasher::new();
    let mut f = std::fs::File::open(path).map_err(io("cannot read", path))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io("cannot read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().to_hex().to_string())
}

fn sync_file(path: &Path) -> Result<(), VectorError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io("cannot sync", path))
}

fn sync_dir(dir: &Path) {
    // Makes the rename durable; not every platform can open a directory, and the store
    // switch that follows is what makes the snapshot current anyway.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests;
