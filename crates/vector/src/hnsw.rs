//! Approximate nearest neighbours with HNSW, from the `usearch` crate.
//!
//! Chosen by measurement (BENCHMARKS.md, "Vector index"): on 100k 384-dimensional vectors
//! usearch built its graph 3.6x faster than hnsw_rs and answered 3x faster at equal recall,
//! and it supports deletions, filtered search, saving, and memory-mapped loading.
//!
//! The keys are kept beside the graph (usearch cannot list them) so that the index can be
//! checked against the store and turned back into an exact index.

use crate::{VectorError, dot};
use situate_core::{CardSet, IndexHit};
use std::collections::HashSet;
use std::path::Path;
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

/// Graph degree (usearch's `connectivity`, HNSW's M). With M = 16, efConstruction = 128,
/// ef = 200, recall@20 on the synthetic benchmark was 0.79 at 20k vectors; M = 32,
/// efConstruction = 200, ef = 400 gave 0.977 (BENCHMARKS.md).
const CONNECTIVITY: usize = 32;
/// Candidates kept while inserting (efConstruction).
const EXPANSION_ADD: usize = 200;
/// Candidates kept while searching (ef); raised to the number asked for when larger.
pub const EXPANSION_SEARCH: usize = 400;

/// An HNSW graph over unit vectors (inner-product metric).
pub struct HnswIndex {
    index: Index,
    keys: HashSet<u64>,
    dim: usize,
}

fn ffi<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> VectorError + '_ {
    move |e| VectorError::Ann(format!("{what}: {e}"))
}

impl HnswIndex {
    /// An empty graph of `dim` dimensions.
    pub fn new(dim: usize) -> Result<Self, VectorError> {
        let options = IndexOptions {
            dimensions: dim,
            metric: MetricKind::IP,
            quantization: ScalarKind::F32,
            connectivity: CONNECTIVITY,
            expansion_add: EXPANSION_ADD,
            expansion_search: EXPANSION_SEARCH,
            multi: false,
        };
        let mut index = Index::new(&options).map_err(ffi("creating the HNSW index"))?;
        use_situate_dot(&mut index, dim);
        Ok(HnswIndex {
            index,
            keys: HashSet::new(),
            dim,
        })
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The keys, in no order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.keys.iter().copied()
    }

    /// Makes room for `extra` more vectors (usearch needs capacity before adding).
    fn reserve(&self, extra: usize) -> Result<(), VectorError> {
        let capacity = self.capacity_for(extra);
        if capacity > self.index.capacity() {
            self.index
                .reserve(capacity)
                .map_err(ffi("reserving HNSW capacity"))?;
        }
        Ok(())
    }

    /// The capacity `extra` more vectors need: the current one if it suffices, else
    /// doubled (at least 1024), so that growing one vector at a time stays amortised.
    fn capacity_for(&self, extra: usize) -> usize {
        let (need, capacity) = (self.index.size() + extra, self.index.capacity());
        if need > capacity {
            need.max(capacity * 2).max(1024)
        } else {
            capacity
        }
    }

    /// Adds (or replaces) `key`'s vector.
    pub fn add(&mut self, key: u64, v: &[f32]) -> Result<(), VectorError> {
        if v.len() != self.dim {
            return Err(VectorError::Dimension {
                expected: self.dim,
                got: v.len(),
            });
        }
        if self.keys.contains(&key) {
            self.remove(key)?;
        }
        self.reserve(1)?;
        self.index.add(key, v).map_err(ffi("adding to HNSW"))?;
        self.keys.insert(key);
        Ok(())
    }

    /// Adds (or replaces) many vectors, inserted concurrently on rayon's pool (usearch's
    /// graph takes concurrent insertions once it has a context per thread). Insertion is
    /// most of an HNSW index's build time, one vector at a time on one core: at 1M chunks
    /// it kept ingest to about 200 chunks/s (BENCHMARKS.md). The graph then depends on the
    /// order the threads happened to insert in, which an approximate index allows; the set
    /// of keys and vectors does not. A key given twice keeps its last vector.
    pub fn add_batch(&mut self, items: &[(u64, &[f32])]) -> Result<(), VectorError> {
        if let Some((_, v)) = items.iter().find(|(_, v)| v.len() != self.dim) {
            return Err(VectorError::Dimension {
                expected: self.dim,
                got: v.len(),
            });
        }
        // The last occurrence of each key, in the batch's order.
        let mut last = std::collections::HashMap::with_capacity(items.len());
        for (i, (k, _)) in items.iter().enumerate() {
            last.insert(*k, i);
        }
        let items: Vec<&(u64, &[f32])> = items
            .iter()
            .enumerate()
            .filter(|(i, (k, _))| last.get(k) == Some(i))
            .map(|(_, item)| item)
            .collect();
        for (k, _) in &items {
            if self.keys.contains(k) {
                self.remove(*k)?;
            }
        }
        let threads = rayon::current_num_threads().max(1);
        self.index
            .reserve_capacity_and_threads(self.capacity_for(items.len()), threads)
            .map_err(ffi("reserving HNSW capacity"))?;
        let index = &self.index;
        let added = if threads == 1 || items.len() < 2 * threads {
            items.iter().try_for_each(|(k, v)| index.add(*k, v))
        } else {
            use rayon::prelude::*;
            items.par_iter().try_for_each(|(k, v)| index.add(*k, v))
        };
        // Keys are recorded even when an insertion failed midway: `keys` must hold every key
        // the graph may hold (removing an absent key is harmless; forgetting one is not).
        self.keys.extend(items.iter().map(|(k, _)| *k));
        added.map_err(ffi("adding to HNSW"))
    }

    /// Removes `key`; `false` when absent.
    pub fn remove(&mut self, key: u64) -> Result<bool, VectorError> {
        if !self.keys.remove(&key) {
            return Ok(false);
        }
        self.index.remove(key).map_err(ffi("removing from HNSW"))?;
        Ok(true)
    }

    /// `key`'s vector.
    pub fn get(&self, key: u64) -> Option<Vec<f32>> {
        if !self.keys.contains(&key) {
            return None;
        }
        let mut v = vec![0f32; self.dim];
        match self.index.get(key, &mut v) {
            Ok(1) => Some(v),
            _ => None,
        }
    }

    /// The approximate `limit` best, best first; with a filter, only allowed keys. A
    /// filter that allows few keys is searched exactly over those keys instead (HNSW with a
    /// very selective filter wanders the graph and may return fewer than `limit`).
    pub fn search(
        &self,
        query: &[f32],
        limit: usize,
        filter: Option<&CardSet>,
    ) -> Result<Vec<IndexHit>, VectorError> {
        if self.keys.is_empty() || limit == 0 || query.len() != self.dim {
            return Ok(Vec::new());
        }
        if let Some(f) = filter
            && f.len() <= 20 * limit.max(100)
        {
            let mut top = crate::Candidates::new(limit);
            let mut buf = vec![0f32; self.dim];
            for key in f.iter().filter(|k| self.keys.contains(k)) {
                if let Ok(1) = self.index.get(key, &mut buf) {
                    top.push(key, dot(query, &buf));
                }
            }
            return Ok(top.into_sorted());
        }
        if self.index.expansion_search() < limit {
            self.index.change_expansion_search(limit);
        }
        let m = match filter {
            None => self.index.search(query, limit),
            Some(f) => self.index.filtered_search(query, limit, |k| f.contains(k)),
        }
        .map_err(ffi("searching HNSW"))?;
        // usearch's inner-product distance is 1 - dot.
        let mut hits: Vec<IndexHit> = m
            .keys
            .iter()
            .zip(&m.distances)
            .map(|(&card, &d)| IndexHit {
                card,
                score: 1.0 - d,
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.card.cmp(&b.card)));
        Ok(hits)
    }

    /// Sets the search effort (ef, candidates kept while searching); a search still keeps
    /// at least as many as it is asked for.
    pub fn set_search_effort(&self, ef: usize) {
        self.index.change_expansion_search(ef.max(1));
    }

    /// Writes the graph to `path` (not atomically: the caller writes to a temporary name
    /// and renames).
    pub fn save(&self, path: &Path) -> Result<(), VectorError> {
        let p = path_str(path)?;
        self.index.save(p).map_err(ffi("saving the HNSW index"))
    }

    /// Loads a graph saved by [`HnswIndex::save`] with its keys; `view` memory-maps it
    /// read-only instead of copying it in (for searches that change nothing).
    pub fn load(path: &Path, keys: Vec<u64>, view: bool) -> Result<Self, VectorError> {
        check_file(path)?;
        let p = path_str(path)?;
        let mut index = if view {
            Index::restore_view(p)
        } else {
            Index::restore(p)
        }
        .map_err(ffi("loading the HNSW index"))?;
        index.change_expansion_search(EXPANSION_SEARCH);
        index.change_expansion_add(EXPANSION_ADD);
        let dim = index.dimensions();
        // A loaded graph comes back with usearch's built-in metric (the file records only
        // the metric's kind), so situate's is set again.
        use_situate_dot(&mut index, dim);
        if index.size() != keys.len() {
            return Err(VectorError::Corrupt(format!(
                "{}: the graph holds {} vectors, its key list {}",
                path.display(),
                index.size(),
                keys.len()
            )));
        }
        Ok(HnswIndex {
            index,
            keys: keys.into_iter().collect(),
            dim,
        })
    }
}

/// Makes usearch measure distances with situate's dot product (`1 - dot`, the same
/// distance as usearch's inner-product metric, so saved graphs stay interchangeable).
///
/// Why: this build leaves out NumKong (usearch's SIMD kernels, about 240 s of a clean build),
/// and usearch's own loop is compiled for baseline x86-64 (SSE2: the C++ build does not get
/// rustc's `target-cpu`), whereas [`dot`] is compiled by rustc for the target CPU (AVX2 or
/// AVX-512 here). At 1M vectors the distance loop was 62% of ingest (BENCHMARKS.md).
/// usearch calls the closure through a function pointer for every distance.
fn use_situate_dot(index: &mut Index, dim: usize) {
    index.change_metric::<f32>(Box::new(move |a: *const f32, b: *const f32| {
        // SAFETY: usearch passes pointers to two vectors of the index's `dim` f32 each:
        // stored vectors, or queries whose length `add`, `add_batch` and `search` check.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(a, dim),
                std::slice::from_raw_parts(b, dim),
            )
        };
        1.0 - dot(a, b)
    }));
}

/// Checks a saved graph's structure before usearch reads it: usearch (C++) trusts its file,
/// and a graph whose neighbour lists point past its nodes makes a search read memory it
/// does not own (found by trying damaged graphs sealed with right checksums: the metric
/// was called with a null pointer). Written by hand because no crate reads this format:
/// usearch 2's layout of an `index_dense_gt<u64, u32>` with f32 vectors, as its
/// `save_to_stream` writes it:
///
/// - the vectors: rows and bytes per row (two `u32`), then the rows;
/// - a 64-byte head: magic `usearch`, version (3 × `u16`), metric, scalar, key and slot
///   kinds (4 × `u8`), present and deleted counts and dimensions (3 × `u64`), multi;
/// - the graph's header: size, connectivity, base connectivity, top level, entry slot
///   (5 × `u64`);
/// - each node's level (`i16`), then each node: key (`u64`), level (`i16`), then for level
///   0 and each level above it a neighbour count (`u32`) and that level's capacity of slots
///   (`u32`).
///
/// Every count is checked against its capacity, every neighbour and the entry against the
/// node count, every level against the top level, and the lengths against the file's.
fn check_file(path: &Path) -> Result<(), VectorError> {
    use std::io::{BufReader, Read, Seek, SeekFrom};
    let corrupt = |what: &str| VectorError::Corrupt(format!("{}: {what}", path.display()));
    let file = std::fs::File::open(path).map_err(crate::io("cannot read", path))?;
    let len = file
        .metadata()
        .map_err(crate::io("cannot read", path))?
        .len();
    let mut r = BufReader::with_capacity(1 << 16, file);
    let take = |r: &mut BufReader<std::fs::File>, n: usize| -> Result<Vec<u8>, VectorError> {
        let mut b = vec![0u8; n];
        r.read_exact(&mut b)
            .map_err(|_| corrupt("the HNSW graph is truncated"))?;
        Ok(b)
    };
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |b: &[u8], at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(x)
    };
    let matrix = take(&mut r, 8)?;
    let (rows, row_bytes) = (u64::from(u32_at(&matrix, 0)), u64::from(u32_at(&matrix, 4)));
    let vectors = rows
        .checked_mul(row_bytes)
        .and_then(|v| i64::try_from(v).ok())
        .filter(|&v| v as u64 <= len)
        .ok_or_else(|| corrupt("its vectors are longer than the file"))?;
    r.seek(SeekFrom::Current(vectors))
        .map_err(crate::io("cannot read", path))?;
    let head = take(&mut r, 64)?;
    if &head[..7] != b"usearch" {
        return Err(corrupt("not a usearch graph"));
    }
    let dims = u64_at(&head, 33);
    if u64_at(&head, 17).checked_add(u64_at(&head, 25)) != Some(rows)
        || dims.checked_mul(4) != Some(row_bytes)
    {
        return Err(corrupt("its counts do not match its vectors"));
    }
    let g = take(&mut r, 40)?;
    let (size, m, m0, top, entry) = (
        u64_at(&g, 0),
        u64_at(&g, 8),
        u64_at(&g, 16),
        u64_at(&g, 24),
        u64_at(&g, 32),
    );
    if size != rows || !(2..=4096).contains(&m) || !(m..=8192).contains(&m0) || top > 64 {
        return Err(corrupt("its graph header is out of range"));
    }
    if size > 0 {
        if entry >= size {
            return Err(corrupt("its entry point is past its nodes"));
        }
        // Each node takes at least its level, key, level again and base list: a count the
        // file cannot hold is refused before anything that size is allocated.
        if size.saturating_mul(2 + 8 + 2 + 4 + 4 * m0) > len {
            return Err(corrupt("it records more nodes than the file holds"));
        }
        let levels: Vec<i16> = take(&mut r, size as usize * 2)?
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        if levels.iter().any(|&l| l < 0 || l as u64 > top) || levels[entry as usize] as u64 != top {
            return Err(corrupt("a node's level is out of range"));
        }
        let (m, m0) = (m as usize, m0 as usize);
        // One buffer for every node: a large graph has millions.
        let mut node = Vec::new();
        for &level in &levels {
            node.resize(8 + 2 + (4 + 4 * m0) + level as usize * (4 + 4 * m), 0);
            r.read_exact(&mut node)
                .map_err(|_| corrupt("the HNSW graph is truncated"))?;
            if i16::from_le_bytes([node[8], node[9]]) != level {
                return Err(corrupt("a node's level differs from the level list"));
            }
            let mut at = 10;
            for cap in std::iter::once(m0).chain(std::iter::repeat_n(m, level as usize)) {
                let count = u32_at(&node, at) as usize;
                if count > cap {
                    return Err(corrupt("a node has more neighbours than it has room for"));
                }
                if (0..count).any(|i| u64::from(u32_at(&node, at + 4 + 4 * i)) >= size) {
                    return Err(corrupt("a neighbour is past the graph's nodes"));
                }
                at += 4 + 4 * cap;
            }
        }
    }
    if r.stream_position()
        .map_err(crate::io("cannot read", path))?
        != len
    {
        return Err(corrupt("bytes follow the graph"));
    }
    Ok(())
}

fn path_str(path: &Path) -> Result<&str, VectorError> {
    path.to_str()
        .ok_or_else(|| VectorError::Corrupt(format!("{} is not a UTF-8 path", path.display())))
}
