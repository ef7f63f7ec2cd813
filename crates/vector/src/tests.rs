use super::*;

/// Deterministic pseudo-random unit vectors (xorshift), clustered so neighbours exist.
fn vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut s = seed.max(1);
    let mut r = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let centres: Vec<Vec<f32>> = (0..16).map(|_| (0..dim).map(|_| r()).collect()).collect();
    (0..n)
        .map(|i| {
            let c = &centres[i % centres.len()];
            let v: Vec<f32> = c.iter().map(|x| x + 0.5 * r()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn filled(backend: Backend, n: usize) -> (Vectors, Vec<Vec<f32>>) {
    let data = vectors(n, 16, 7);
    let mut ix = Vectors::new(16, backend).expect("new");
    for (i, v) in data.iter().enumerate() {
        ix.add(i as u64 + 1, v).expect("add");
    }
    ix.rebalance().expect("rebalance");
    (ix, data)
}

fn keys(h: &[IndexHit]) -> Vec<u64> {
    h.iter().map(|h| h.card).collect()
}

#[test]
fn hnsw_agrees_with_exact_search_on_a_small_set() {
    let (exact, data) = filled(Backend::Exact, 500);
    let (ann, _) = filled(Backend::Hnsw, 500);
    assert_eq!((exact.kind(), ann.kind()), ("exact", "hnsw"));
    let mut found = 0;
    for q in data.iter().step_by(25) {
        let e = exact.search_vec(q, 10, None).expect("exact");
        let a = ann.search_vec(q, 10, None).expect("ann");
        assert_eq!(
            e[0].card, a[0].card,
            "the vector itself is its own best match"
        );
        assert!((e[0].score - 1.0).abs() < 1e-4);
        found += a
            .iter()
            .filter(|h| e.iter().any(|x| x.card == h.card))
            .count();
    }
    // 20 queries x 10: HNSW on 500 points should find essentially all.
    assert!(found >= 196, "ANN recall too low: {found}/200");
}

#[test]
fn filters_apply_inside_both_backends_even_when_they_remove_most_hits() {
    for backend in [Backend::Exact, Backend::Hnsw] {
        let (ix, data) = filled(backend, 400);
        // Allow 7 keys far from the query's cluster: all 7 come back, nothing else.
        let allowed: CardSet = (0..7u64).map(|i| i * 16 + 2).collect();
        let hits = ix.search_vec(&data[0], 20, Some(&allowed)).expect("search");
        let mut got = keys(&hits);
        got.sort_unstable();
        assert_eq!(got, allowed.iter().collect::<Vec<_>>(), "{backend:?}");
        // A broad filter (every other key) still yields a full page of allowed keys.
        let half: CardSet = (1..=400u64).filter(|k| k % 2 == 0).collect();
        let hits = ix.search_vec(&data[1], 20, Some(&half)).expect("search");
        assert_eq!(hits.len(), 20, "{backend:?}");
        assert!(hits.iter().all(|h| half.contains(h.card)), "{backend:?}");
    }
}

#[test]
fn snapshots_round_trip_and_damage_is_detected() {
    let dir = tempfile::tempdir().expect("tmp");
    for backend in [Backend::Exact, Backend::Hnsw] {
        let (mut ix, data) = filled(backend, 300);
        assert!(ix.remove(5).expect("remove"));
        let stem = ix.save(dir.path(), 42).expect("save");
        assert_eq!(stem, "vectors-42");
        for view in [false, true] {
            let back = Vectors::load(dir.path(), &stem, backend, view).expect("load");
            assert_eq!(back.kind(), ix.kind());
            assert_eq!(back.keys(), ix.keys());
            assert!(!back.keys().contains(&5));
            assert_eq!(
                keys(&back.search_vec(&data[9], 5, None).expect("search")),
                keys(&ix.search_vec(&data[9], 5, None).expect("search"))
            );
        }
        Vectors::remove_stale(dir.path(), None);
    }
    // A flipped byte is refused with a clear error.
    let (ix, _) = filled(Backend::Exact, 10);
    let stem = ix.save(dir.path(), 1).expect("save");
    let path = dir.path().join(format!("{stem}.flat"));
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[30] ^= 1;
    std::fs::write(&path, bytes).expect("write");
    let err = Vectors::load(dir.path(), &stem, Backend::Auto, false)
        .err()
        .expect("damaged file refused");
    assert!(err.to_string().contains("checksum"), "{err}");
}

/// `body` with the trailing BLAKE3 checksum the snapshot files carry.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out
}

fn flat_header(dim: u32, n: u64) -> Vec<u8> {
    let mut h = b"SITVFLT1".to_vec();
    h.extend_from_slice(&dim.to_le_bytes());
    h.extend_from_slice(&n.to_le_bytes());
    h
}

#[test]
fn a_header_whose_counts_do_not_fit_its_file_is_refused_even_with_a_right_checksum() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("vectors-1.flat");
    let load = |body: &[u8]| {
        std::fs::write(&path, sealed(body)).expect("write");
        Vectors::load(dir.path(), "vectors-1", Backend::Auto, false)
            .err()
            .map(|e| e.to_string())
    };
    // Four billion dimensions and no vector: refused, not a 16 GiB buffer.
    let err = load(&flat_header(u32::MAX, 0)).expect("refused");
    assert!(err.contains("dimensions"), "{err}");
    // A count whose size in bytes overflows to the body's length (2^61 + 1 vectors of 2
    // dimensions, "16 bytes"): refused as the wrong size.
    let mut body = flat_header(2, (1 << 61) + 1);
    body.extend_from_slice(&[0; 16]);
    let err = load(&body).expect("refused");
    assert!(err.contains("wrong size"), "{err}");
    // The same for an HNSW snapshot's key list.
    let keys = dir.path().join("vectors-2.keys");
    let mut body = b"SITVHNS1".to_vec();
    body.extend_from_slice(&2u32.to_le_bytes());
    body.extend_from_slice(&(1u64 << 61).to_le_bytes());
    body.extend_from_slice(&[b'0'; 64]);
    std::fs::write(&keys, sealed(&body)).expect("write");
    let err = Vectors::load(dir.path(), "vectors-2", Backend::Auto, false)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("wrong size"), "{err}");
    // A sound empty snapshot still loads.
    assert!(load(&flat_header(16, 0)).is_none());
}

#[test]
fn auto_switches_backend_at_the_threshold_and_back() {
    let (mut ix, data) = filled(Backend::Auto, 100);
    assert_eq!(ix.kind(), "exact");
    ix.set_threshold(50).expect("threshold");
    assert_eq!(ix.kind(), "hnsw");
    let before = keys(&ix.search_vec(&data[3], 3, None).expect("search"));
    for k in 1..=80u64 {
        ix.remove(k).expect("remove");
    }
    ix.rebalance().expect("rebalance");
    assert_eq!((ix.kind(), ix.len()), ("exact", 20));
    assert_eq!(ix.keys(), (81..=100u64).collect::<Vec<_>>());
    assert!(before.contains(&4));
    // Exact search over the remaining keys from the moved-back vectors.
    let hits = ix.search_vec(&data[90], 1, None).expect("search");
    assert_eq!(hits[0].card, 91);
    assert!(
        ix.search_vec(&[1.0], 1, None).is_err(),
        "wrong dimension is an error"
    );
}

#[test]
fn an_exact_copy_of_an_hnsw_index_holds_every_vector_and_searches_exactly() {
    let (exact, data) = filled(Backend::Exact, 300);
    let (ann, _) = filled(Backend::Hnsw, 300);
    for source in [&exact, &ann] {
        let copy = source.exact_copy().expect("copy");
        assert_eq!(copy.len(), 300);
        for (i, v) in data.iter().enumerate() {
            let got = copy.get(i as u64 + 1).expect("every key");
            assert!(got.iter().zip(v).all(|(a, b)| (a - b).abs() < 1e-6));
        }
        for q in data.iter().step_by(30) {
            assert_eq!(
                keys(&copy.search(q, 10, None)),
                keys(&exact.search_vec(q, 10, None).expect("exact")),
            );
        }
    }
}

#[test]
fn a_batch_is_inserted_concurrently_replaces_keys_and_keeps_a_repeated_keys_last_vector() {
    let data = vectors(2000, 16, 11);
    let (mut batched, mut single) = (
        Vectors::new(16, Backend::Hnsw).expect("new"),
        Vectors::new(16, Backend::Exact).expect("new"),
    );
    let items: Vec<(u64, &[f32])> = data
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64 + 1, v.as_slice()))
        .collect();
    batched.add_batch(&items[..1500]).expect("batch");
    // The second batch replaces keys 1..=100 with other vectors, and gives key 1600 twice.
    let mut second: Vec<(u64, &[f32])> = items[1500..].to_vec();
    second.extend((0..100).map(|i| (i as u64 + 1, data[1999 - i].as_slice())));
    second.push((1600, data[7].as_slice()));
    batched.add_batch(&second).expect("batch");
    for (k, v) in items.iter().chain(&second) {
        single.add(*k, v).expect("add");
    }
    assert_eq!((batched.len(), single.len()), (2000, 2000));
    let (copy, want) = (
        batched.exact_copy().expect("copy"),
        single.exact_copy().expect("copy"),
    );
    for k in 1..=2000u64 {
        assert_eq!(copy.get(k), want.get(k), "key {k}");
    }
    // The graph built by several threads finds what exact search finds.
    let mut found = 0;
    for q in data.iter().step_by(100) {
        let e = single.search_vec(q, 10, None).expect("exact");
        let a = batched.search_vec(q, 10, None).expect("ann");
        found += a
            .iter()
            .filter(|h| e.iter().any(|x| x.card == h.card))
            .count();
    }
    assert!(
        found >= 190,
        "recall after concurrent insertion: {found}/200"
    );
    let bad = [(5u64, &data[0][..8])];
    assert!(matches!(
        batched.add_batch(&bad),
        Err(VectorError::Dimension {
            expected: 16,
            got: 8
        })
    ));
    assert_eq!(batched.len(), 2000, "a refused batch changes nothing");
}

/// Damaged graphs sealed with right checksums (a file from elsewhere): usearch trusts its
/// file, so before `hnsw::check_file` a neighbour list pointing past the nodes made a
/// search read memory it did not own (the metric was called with a null pointer, and the
/// process aborted). Each must now load and search, or be refused as damaged.
#[test]
fn a_damaged_graph_with_right_checksums_is_refused_or_searched_never_a_crash() {
    let dir = tempfile::tempdir().expect("tmp");
    let (ix, data) = filled(Backend::Hnsw, 300);
    let stem = ix.save(dir.path(), 1).expect("save");
    let graph = std::fs::read(dir.path().join(format!("{stem}.hnsw"))).expect("graph");
    let keys = std::fs::read(dir.path().join(format!("{stem}.keys"))).expect("keys");
    let body = &keys[..keys.len() - 32];
    let mut s = 12345u64;
    let mut r = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s as usize
    };
    let mut refused = std::collections::BTreeSet::new();
    let mut loaded = 0;
    for i in 0..400 {
        let mut g = graph.clone();
        match i % 3 {
            0 => g.truncate(r() % g.len()),
            1 => {
                for _ in 0..1 + r() % 8 {
                    let at = r() % g.len();
                    g[at] ^= (r() as u8) | 1;
                }
            }
            // The graph's part: past the vectors (rows × bytes + 8) and their 64-byte head.
            _ => {
                let start = 8 + 300 * 16 * 4 + 64;
                for _ in 0..1 + r() % 4 {
                    let at = start + r() % (g.len() - start);
                    g[at] = r() as u8;
                }
            }
        }
        let mut b = body[..20].to_vec();
        b.extend_from_slice(blake3::hash(&g).to_hex().as_bytes());
        b.extend_from_slice(&body[84..]);
        std::fs::write(dir.path().join("vectors-9.hnsw"), &g).expect("write");
        std::fs::write(dir.path().join("vectors-9.keys"), sealed(&b)).expect("write");
        for view in [false, true] {
            match Vectors::load(dir.path(), "vectors-9", Backend::Auto, view) {
                Ok(v) => {
                    loaded += 1;
                    let _ = v.search_vec(&data[i % data.len()], 5, None);
                }
                Err(VectorError::Corrupt(e)) => {
                    refused.insert(e.split(": ").nth(1).unwrap_or_default().to_string());
                }
                Err(VectorError::Ann(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(
        loaded > 0,
        "some damage (inside the vectors) leaves a graph that loads"
    );
    assert!(
        refused.contains("a neighbour is past the graph's nodes"),
        "{refused:?}"
    );
}
