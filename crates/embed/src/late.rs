//! Late chunking, shared by the embedders that do it (EmbeddingGemma, nomic): a
//! document read in windows of the model's length, each chunk's vector pooled from its
//! tokens' states.

use candle_core::Tensor;

/// The model id of a late-chunking embedder: `id`, suffixed `:late`.
pub(crate) fn late_id(id: String, late: bool) -> String {
    if late { format!("{id}:late") } else { id }
}

/// The windows late chunking reads a tokenized text in (`ids` with its opening and closing
/// special tokens): the whole text when it fits `max`, else windows of `max` tokens (the
/// special tokens around each) whose content overlaps by a quarter. Returns each window's
/// ids and the first content token it holds.
pub(crate) fn late_windows(ids: &[u32], max: usize) -> Vec<(Vec<u32>, usize)> {
    if ids.len() <= max || ids.len() < 2 || max < 4 {
        return vec![(ids.to_vec(), 0)];
    }
    let (first, last) = (ids[0], ids[ids.len() - 1]);
    let content = &ids[1..ids.len() - 1];
    let width = max - 2;
    let stride = (width * 3 / 4).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let end = (start + width).min(content.len());
        let mut w = Vec::with_capacity(end - start + 2);
        w.push(first);
        w.extend_from_slice(&content[start..end]);
        w.push(last);
        out.push((w, start));
        if end == content.len() {
            break;
        }
        start += stride;
    }
    out
}

/// Late chunking's pooling, shared by the embedders that do it: the tokenized text (`ids`
/// with their byte `offsets`; special tokens have empty offsets) read in
/// [`late_windows`] by `states` (packed token states and each window's rows), each token's
/// state taken from the window where it is farthest from an edge, and each span's tokens
/// (those whose bytes overlap it) averaged. Returns spans × hidden, before any head.
pub(crate) fn late_pool(
    ids: &[u32],
    offsets: &[(usize, usize)],
    spans: &[(usize, usize)],
    max: usize,
    states: impl Fn(&[Vec<u32>]) -> candle_core::Result<(Tensor, Vec<(usize, usize)>)>,
) -> candle_core::Result<Tensor> {
    let windows = late_windows(ids, max);
    let texts: Vec<Vec<u32>> = windows.iter().map(|(w, _)| w.clone()).collect();
    let (x, segs) = states(&texts)?;
    // The packed row holding each token's state (content tokens only: index into `ids`).
    let mut row = vec![None; ids.len()];
    let mut best = vec![0usize; ids.len()];
    for ((_, start), &(s, n)) in windows.iter().zip(&segs) {
        let single = windows.len() == 1;
        for j in 0..n {
            // Window row j is `ids[j]` for a single window, else content token start + j - 1.
            let token = if single {
                j
            } else if j == 0 || j + 1 == n {
                continue;
            } else {
                start + j
            };
            let margin = j.min(n - 1 - j);
            if token < ids.len() && (row[token].is_none() || margin > best[token]) {
                row[token] = Some(s + j);
                best[token] = margin;
            }
        }
    }
    let mut means = Vec::with_capacity(spans.len());
    for &(a, b) in spans {
        let rows: Vec<u32> = offsets
            .iter()
            .enumerate()
            .filter(|&(_, &(s, e))| e > s && s < b && e > a)
            .filter_map(|(i, _)| row.get(i).copied().flatten().map(|r| r as u32))
            .collect();
        if rows.is_empty() {
            candle_core::bail!("the span {a}..{b} holds no token of the document");
        }
        let idx = Tensor::new(rows.as_slice(), x.device())?;
        means.push(x.index_select(&idx, 0)?.mean_keepdim(0)?);
    }
    Tensor::cat(&means, 0)
}
