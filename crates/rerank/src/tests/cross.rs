//! Cross-encoders against candle-transformers' BERT and XLM-RoBERTa on the same weights.

use super::*;
use crate::cross::{CrossEncoder, CrossOptions, LongPassages};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

const WORDS: &[&str] = &[
    "the",
    "revenue",
    "grew",
    "by",
    "three",
    "percent",
    "in",
    "quarter",
    "acme",
    "report",
    "costs",
    "fell",
    "anvil",
    "plant",
    "closed",
    "cloud",
    "storage",
    "unit",
    "customers",
    "what",
    "did",
    "how",
    "much",
    "why",
    "who",
    "leads",
    "team",
    "maria",
    "lopez",
    "denver",
    "context",
    "passage",
    "from",
    "a",
    "of",
    "and",
    "to",
    "was",
    "is",
    "it",
];

const HIDDEN: usize = 16;
const LAYERS: usize = 2;
const INTER: usize = 32;
const POSITIONS: usize = 64;

/// Deterministic pseudo-random values (an LCG), uniform in [-scale, scale].
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

struct Weights {
    map: HashMap<String, Tensor>,
    seed: u64,
}

impl Weights {
    fn add(&mut self, name: &str, shape: &[usize], scale: f32, offset: f32) {
        self.seed += 1;
        let n: usize = shape.iter().product();
        let v: Vec<f32> = values(n, self.seed, scale)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        let t = Tensor::from_vec(v, shape, &Device::Cpu).expect("tensor");
        self.map.insert(name.to_string(), t);
    }

    fn dense(&mut self, name: &str, input: usize, output: usize) {
        self.add(&format!("{name}.weight"), &[output, input], 0.4, 0.0);
        self.add(&format!("{name}.bias"), &[output], 0.1, 0.0);
    }

    fn norm(&mut self, name: &str) {
        self.add(&format!("{name}.weight"), &[HIDDEN], 0.1, 1.0);
        self.add(&format!("{name}.bias"), &[HIDDEN], 0.1, 0.0);
    }

    fn encoder(&mut self, p: &str, vocab: usize, positions: usize, types: usize) {
        self.add(
            &format!("{p}embeddings.word_embeddings.weight"),
            &[vocab, HIDDEN],
            1.0,
            0.0,
        );
        self.add(
            &format!("{p}embeddings.position_embeddings.weight"),
            &[positions, HIDDEN],
            0.5,
            0.0,
        );
        self.add(
            &format!("{p}embeddings.token_type_embeddings.weight"),
            &[types, HIDDEN],
            0.5,
            0.0,
        );
        self.norm(&format!("{p}embeddings.LayerNorm"));
        for i in 0..LAYERS {
            let l = format!("{p}encoder.layer.{i}");
            for m in ["query", "key", "value"] {
                self.dense(&format!("{l}.attention.self.{m}"), HIDDEN, HIDDEN);
            }
            self.dense(&format!("{l}.attention.output.dense"), HIDDEN, HIDDEN);
            self.norm(&format!("{l}.attention.output.LayerNorm"));
            self.dense(&format!("{l}.intermediate.dense"), HIDDEN, INTER);
            self.dense(&format!("{l}.output.dense"), INTER, HIDDEN);
            self.norm(&format!("{l}.output.LayerNorm"));
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Family {
    Bert,
    XlmR,
}

/// Writes a tiny random cross-encoder of `family` with `labels` labels into `dir`.
fn write_model(dir: &Path, family: Family, labels: usize, seed: u64) {
    let specials: &[&str] = match family {
        Family::Bert => &["[PAD]", "[UNK]", "[CLS]", "[SEP]"],
        Family::XlmR => &["<s>", "<pad>", "</s>", "<unk>"],
    };
    let vocab: HashMap<String, u32> = specials
        .iter()
        .chain(WORDS)
        .enumerate()
        .map(|(i, w)| (w.to_string(), i as u32))
        .collect();
    let v = vocab.len();
    // A tokenizer.json as Hugging Face writes them: WordPiece with BERT's pair template, or
    // a word-level vocabulary with RoBERTa's `<s> a </s></s> b </s>`.
    let tokenizer = match family {
        Family::Bert => json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": {"type": "BertNormalizer", "clean_text": true,
                "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
            "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": vocab},
        }),
        Family::XlmR => json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": {"type": "Lowercase"},
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2],
                "cls": ["<s>", 0], "trim_offsets": true, "add_prefix_space": false},
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
        }),
    };
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).expect("tokenizer.json");
    let mut w = Weights {
        map: HashMap::new(),
        seed,
    };
    let id2label: Value = (0..labels)
        .map(|i| (i.to_string(), json!(format!("LABEL_{i}"))))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let config = match family {
        Family::Bert => {
            w.encoder("bert.", v, POSITIONS, 2);
            w.dense("bert.pooler.dense", HIDDEN, HIDDEN);
            w.dense("classifier", HIDDEN, labels);
            json!({
                "architectures": ["BertForSequenceClassification"], "model_type": "bert",
                "vocab_size": v, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                "num_attention_heads": 2, "intermediate_size": INTER, "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                "max_position_embeddings": POSITIONS, "type_vocab_size": 2,
                "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
                "id2label": id2label,
            })
        }
        Family::XlmR => {
            w.encoder("roberta.", v, POSITIONS + 2, 1);
            w.dense("classifier.dense", HIDDEN, HIDDEN);
            w.dense("classifier.out_proj", HIDDEN, labels);
            json!({
                "architectures": ["XLMRobertaForSequenceClassification"],
                "model_type": "xlm-roberta", "vocab_size": v, "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS, "num_attention_heads": 2,
                "intermediate_size": INTER, "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                "max_position_embeddings": POSITIONS + 2, "type_vocab_size": 1,
                "initializer_range": 0.02, "layer_norm_eps": 1e-5, "pad_token_id": 1,
                "position_embedding_type": "absolute", "id2label": id2label,
            })
        }
    };
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config");
    candle_core::safetensors::save(&w.map, dir.join("model.safetensors")).expect("weights");
}

const QUERY: &str = "how much did the revenue grow";
const TEXTS: &[&str] = &[
    "the revenue grew by three percent in the quarter",
    "costs fell",
    "the denver anvil plant closed and costs fell by three percent",
    "maria lopez leads the cloud storage unit and it grew to customers",
];

/// The logits candle-transformers' own models give for one pair (the reference).
fn reference_logits(dir: &Path, family: Family, query: &str, text: &str) -> Vec<f32> {
    let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).expect("tok");
    let enc = tok.encode((query, text), true).expect("encode");
    let dev = Device::Cpu;
    let ids = Tensor::new(enc.get_ids(), &dev)
        .expect("ids")
        .unsqueeze(0)
        .expect("b");
    let types = Tensor::new(enc.get_type_ids(), &dev)
        .expect("types")
        .unsqueeze(0)
        .expect("b");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).expect("read"))
            .expect("json");
    let labels = config["id2label"].as_object().map_or(1, |m| m.len());
    // SAFETY: a file this test wrote and does not change.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &dev)
    }
    .expect("vb");
    let logits = match family {
        Family::Bert => {
            use candle_transformers::models::bert::{BertModel, Config};
            let c: Config = serde_json::from_value(config).expect("config");
            let m = BertModel::load(vb.pp("bert"), &c).expect("bert");
            let h = m.forward(&ids, &types, None).expect("forward");
            let cls = h
                .get(0)
                .expect("b")
                .get(0)
                .expect("cls")
                .unsqueeze(0)
                .expect("r");
            let lin = |x: &Tensor, name: &str, out: usize| {
                let w = vb.get((out, HIDDEN), &format!("{name}.weight")).expect("w");
                let b = vb.get(out, &format!("{name}.bias")).expect("b");
                x.matmul(&w.t().expect("t"))
                    .expect("mm")
                    .broadcast_add(&b)
                    .expect("add")
            };
            let pooled = lin(&cls, "bert.pooler.dense", HIDDEN).tanh().expect("tanh");
            lin(&pooled, "classifier", labels)
        }
        Family::XlmR => {
            use candle_transformers::models::xlm_roberta::{
                Config, XLMRobertaForSequenceClassification,
            };
            let c: Config = serde_json::from_value(config).expect("config");
            let m = XLMRobertaForSequenceClassification::new(labels, &c, vb).expect("xlmr");
            let mask = ids.ones_like().expect("mask");
            m.forward(&ids, &mask, &types.zeros_like().expect("z"))
                .expect("forward")
        }
    };
    logits.flatten_all().expect("flat").to_vec1().expect("vec")
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn check_against_candle(family: Family) {
    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), family, 1, 7);
    let ce = CrossEncoder::load(dir.path(), CrossOptions::default()).expect("loads");
    let passages: Vec<_> = TEXTS.iter().map(|t| passage(t, None)).collect();
    let scores = ce.score_sync(QUERY, &passages).expect("scores");
    let mut distinct = scores.clone();
    distinct.sort_by(f32::total_cmp);
    distinct.dedup_by(|a, b| (*a - *b).abs() < 1e-4);
    assert_eq!(
        distinct.len(),
        TEXTS.len(),
        "random weights give distinct scores: {scores:?}"
    );
    for (t, s) in TEXTS.iter().zip(&scores) {
        let want = sigmoid(reference_logits(dir.path(), family, QUERY, t)[0]);
        assert!((s - want).abs() < 1e-4, "{t}: {s} against candle's {want}");
    }
}

#[test]
fn bert_cross_encoder_matches_candles_bert_with_pooler_and_classifier() {
    check_against_candle(Family::Bert);
}

#[test]
fn xlm_roberta_cross_encoder_matches_candles_xlm_roberta_classifier() {
    check_against_candle(Family::XlmR);
}

#[test]
fn a_passages_score_depends_neither_on_its_batch_nor_on_the_run() {
    for family in [Family::Bert, Family::XlmR] {
        let dir = tempfile::tempdir().expect("tmp");
        write_model(dir.path(), family, 1, 11);
        let batched = CrossEncoder::load(dir.path(), CrossOptions::default()).expect("loads");
        let single = CrossEncoder::load(
            dir.path(),
            CrossOptions {
                batch: 1,
                ..CrossOptions::default()
            },
        )
        .expect("loads");
        let passages: Vec<_> = TEXTS.iter().map(|t| passage(t, None)).collect();
        let all = batched.score_sync(QUERY, &passages).expect("batch");
        // Each passage alone, and in reverse order in one batch with texts of other lengths.
        for (i, p) in passages.iter().enumerate() {
            let alone = single
                .score_sync(QUERY, std::slice::from_ref(p))
                .expect("one");
            assert!(
                (alone[0] - all[i]).abs() < 1e-5,
                "{i}: {} vs {}",
                alone[0],
                all[i]
            );
        }
        let reversed: Vec<_> = passages.iter().rev().copied().collect();
        let rev = batched.score_sync(QUERY, &reversed).expect("rev");
        for (i, s) in rev.iter().rev().enumerate() {
            assert!((s - all[i]).abs() < 1e-5);
        }
        // Deterministic: the same call gives the same bits.
        assert_eq!(batched.score_sync(QUERY, &passages).expect("again"), all);
    }
}

#[test]
fn the_context_is_read_in_its_labelled_section() {
    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), Family::Bert, 1, 3);
    let ce = CrossEncoder::load(dir.path(), CrossOptions::default()).expect("loads");
    let bare = ce
        .score_sync(QUERY, &[passage(TEXTS[1], None)])
        .expect("bare");
    let ctx = ce
        .score_sync(QUERY, &[passage(TEXTS[1], Some("from the acme report"))])
        .expect("ctx");
    let want = sigmoid(
        reference_logits(
            dir.path(),
            Family::Bert,
            QUERY,
            "Context: from the acme report\nPassage: costs fell",
        )[0],
    );
    assert!((ctx[0] - want).abs() < 1e-4, "{} vs {want}", ctx[0]);
    assert!(
        (ctx[0] - bare[0]).abs() > 1e-6,
        "the context changes what is read"
    );
}

#[test]
fn long_passages_are_truncated_or_scored_by_their_best_window() {
    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), Family::Bert, 1, 5);
    let long: String = (0..6)
        .map(|i| TEXTS[i % TEXTS.len()])
        .collect::<Vec<_>>()
        .join(" and ");
    let opts = |long| CrossOptions {
        max_tokens: 24,
        long,
        stride: 4,
        ..CrossOptions::default()
    };
    let cut = CrossEncoder::load(dir.path(), opts(LongPassages::Truncate)).expect("loads");
    let max = CrossEncoder::load(dir.path(), opts(LongPassages::Max)).expect("loads");
    let one = cut.pairs(QUERY, &long).expect("pairs");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].0.len(), 24, "cut to max_tokens exactly");
    let windows = max.pairs(QUERY, &long).expect("windows");
    assert!(windows.len() > 2, "{} windows", windows.len());
    assert_eq!(windows[0], one[0], "the first window is the truncated pair");
    for (ids, types) in &windows {
        assert!(ids.len() <= 24);
        assert_eq!(ids[0], 2, "[CLS] starts every window");
        assert_eq!(ids.iter().filter(|&&t| t == 3).count(), 2, "two [SEP]s");
        assert_eq!(ids.len(), types.len());
        // The query (type 0) is whole in every window.
        assert_eq!(
            types.iter().filter(|&&t| t == 0).count(),
            one[0].1.iter().filter(|&&t| t == 0).count()
        );
    }
    let each = max.score_pairs(&windows).expect("each");
    let best = each.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let got = max.score_sync(QUERY, &[passage(&long, None)]).expect("max");
    assert_eq!(got[0], best);
    assert_eq!(
        cut.score_sync(QUERY, &[passage(&long, None)]).expect("cut")[0],
        each[0]
    );
    // A short passage has one window: both rules agree.
    let short = [passage(TEXTS[0], None)];
    assert_eq!(
        cut.score_sync(QUERY, &short).expect("a"),
        max.score_sync(QUERY, &short).expect("b")
    );
    // A query longer than half the pair keeps half; the passage still gets the rest.
    let long_query = vec!["revenue"; 40].join(" ");
    let pairs = cut.pairs(&long_query, TEXTS[0]).expect("long query");
    assert_eq!(pairs[0].0.len(), 24);
    assert!(pairs[0].1.contains(&1), "the passage is still there");
}

#[test]
fn a_two_label_head_scores_the_relevant_label() {
    for family in [Family::Bert, Family::XlmR] {
        let dir = tempfile::tempdir().expect("tmp");
        write_model(dir.path(), family, 2, 13);
        let ce = CrossEncoder::load(dir.path(), CrossOptions::default()).expect("loads");
        let s = ce.score_sync(QUERY, &[passage(TEXTS[0], None)]).expect("s");
        let l = reference_logits(dir.path(), family, QUERY, TEXTS[0]);
        let want = 1.0 / (1.0 + (l[0] - l[1]).exp());
        assert!((s[0] - want).abs() < 1e-4, "{} vs {want}", s[0]);
    }
}

#[test]
fn bad_model_directories_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), Family::Bert, 1, 1);
    std::fs::remove_file(dir.path().join("tokenizer.json")).expect("rm");
    let e = CrossEncoder::load(dir.path(), CrossOptions::default())
        .err()
        .expect("missing");
    assert!(e.to_string().contains("tokenizer.json is missing"), "{e}");

    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), Family::Bert, 3, 1);
    let e = CrossEncoder::load(dir.path(), CrossOptions::default())
        .err()
        .expect("labels");
    assert!(e.to_string().contains("3"), "{e}");

    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), Family::Bert, 1, 1);
    let mut c: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("config.json")).expect("read"),
    )
    .expect("json");
    c["model_type"] = json!("gpt2");
    std::fs::write(dir.path().join("config.json"), c.to_string()).expect("write");
    let e = CrossEncoder::load(dir.path(), CrossOptions::default())
        .err()
        .expect("type");
    assert!(e.to_string().contains("not supported"), "{e}");

    for bad in ["long=sometimes", "batch=0", "max_tokens=x", "colour=red"] {
        assert!(CrossOptions::parse(bad).is_err(), "{bad}");
    }
    let o = CrossOptions::parse("long=max&stride=32&batch=8&max_tokens=256").expect("ok");
    assert_eq!(
        (o.long, o.stride, o.batch, o.max_tokens),
        (LongPassages::Max, 32, 8, 256)
    );

    assert!(crate::resolve("none", "x").expect("none").is_none());
    let e = crate::resolve("magic", "x").err().expect("unknown");
    assert!(e.to_string().contains("cross-encoder:DIR"), "{e}");
    let e = crate::resolve("cross-encoder:/no/such/dir", "x")
        .err()
        .expect("dir");
    assert!(e.to_string().contains("not a directory"), "{e}");
    let dir = tempfile::tempdir().expect("tmp");
    write_model(dir.path(), Family::XlmR, 1, 1);
    let spec = format!("cross-encoder:{}?long=max", dir.path().display());
    let r = crate::resolve(&spec, "x").expect("loads").expect("some");
    assert!(r.id().starts_with("cross-encoder:"));
    // A bare model directory works too.
    assert!(
        crate::resolve(&dir.path().display().to_string(), "x")
            .expect("bare")
            .is_some()
    );
}
