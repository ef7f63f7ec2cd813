//! Tests with the real SmolLM2-135M-Instruct (`situate models install smollm2-135m-instruct`;
//! `.ci/run` and `scripts/test.sh` install it).

use crate::chat::Template;
use crate::local::LocalLlm;
use crate::{Finish, Llm, LlmContextualizer, SharedPrompt};
use situate_core::{
    ChunkContext, ChunkSpan, ChunkView, ContextSink, ContextStatus, Contextualizer, DocKind,
    DocumentView, Language, TokenUsage,
};
use std::sync::Mutex;

fn smollm2_path() -> std::path::PathBuf {
    let entry = situate_models::CATALOG
        .iter()
        .find(|e| e.name == "smollm2-135m-instruct")
        .expect("in the catalog");
    situate_models::models_dir()
        .join(entry.name)
        .join(entry.files[0].0)
}

fn smollm2() -> LocalLlm {
    let entry = situate_models::CATALOG
        .iter()
        .find(|e| e.name == "smollm2-135m-instruct")
        .expect("in the catalog");
    let path = situate_models::models_dir()
        .join(entry.name)
        .join(entry.files[0].0);
    assert!(
        path.is_file(),
        "SmolLM2 is not installed at {}: run `situate models install smollm2-135m-instruct` (scripts/test.sh does)",
        path.display()
    );
    LocalLlm::load(&path, "local:smollm2-test".into()).expect("loads")
}

const DOC: &str = "# ACME Corp quarterly report, Q2 2023

ACME Corp sells industrial anvils and cloud storage. This report covers the second quarter of 2023.

## Revenue

Revenue grew by 3% over the previous quarter, to $314 million. The growth came from the cloud storage unit, led by Maria Lopez, which added 120 enterprise customers.

## Costs

Operating costs fell by 2% to $250 million after the closure of the Denver anvil plant. Headcount was 1,850 at the end of the quarter.";

/// The three sections of [`DOC`] as chunks.
fn sections() -> Vec<(ChunkSpan, &'static str)> {
    let starts: Vec<usize> = [
        0,
        DOC.find("## Revenue").expect("r"),
        DOC.find("## Costs").expect("c"),
    ]
    .to_vec();
    let mut out = Vec::new();
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(DOC.len());
        let text = DOC[s..e].trim_end();
        let span = ChunkSpan {
            ordinal: i as u32,
            byte_start: s,
            byte_end: s + text.len(),
            char_start: s,
            char_end: s + text.len(),
            heading_path: vec![],
            chunk_id: None,
            ..Default::default()
        };
        out.push((span, text));
    }
    out
}

#[test]
fn the_tokenizer_and_chat_template_come_from_the_gguf() {
    let llm = smollm2();
    assert_eq!(llm.window(), 8192);
    assert_eq!(
        llm.template(),
        &Template::ChatMl {
            default_system: Some(
                "You are a helpful AI assistant named SmolLM, trained by Hugging Face".into()
            ),
            empty_think: false,
        }
    );
    // Special tokens are single ids; digits are split one by one, as SmolLM2's tokenizer does.
    assert_eq!(llm.count_tokens("<|im_start|>"), 1);
    assert_eq!(llm.count_tokens("<|im_end|>"), 1);
    assert_eq!(llm.count_tokens("2023"), 4);
    assert!(llm.count_tokens("Revenue grew by 3%.") < 10);
}

#[tokio::test]
async fn a_reused_document_prefix_gives_the_replies_of_running_it_again() {
    let mut llm = smollm2();
    let prefix = format!("<document>\n{DOC}\n</document>\n");
    let suffixes: Vec<String> = sections()
        .iter()
        .map(|(_, t)| format!("Here is the chunk\n<chunk>\n{t}\n</chunk>\nIn one sentence, what is this chunk about?"))
        .collect();
    fn prompt<'a>(prefix: &'a str, suffixes: &'a [String]) -> SharedPrompt<'a> {
        SharedPrompt {
            system: None,
            prefix,
            suffixes,
            max_tokens: 24,
        }
    }
    let seen = Mutex::new(Vec::new());
    let reused = llm
        .generate_shared(prompt(&prefix, &suffixes), &|i, r| {
            seen.lock().expect("lock").push((i, r.is_ok()));
        })
        .await;
    let mut seen = seen.into_inner().expect("lock");
    seen.sort();
    assert_eq!(
        seen,
        vec![(0, true), (1, true), (2, true)],
        "each reply is reported once, as it is done"
    );
    let reused: Vec<_> = reused.into_iter().map(|r| r.expect("reply")).collect();
    let with_reuse = llm.stats().prefill_tokens;
    let p = reused[0].usage.cache_creation_input_tokens;
    assert!(
        p > 100,
        "the first reply runs the prefix: {:?}",
        reused[0].usage
    );
    for g in &reused[1..] {
        assert_eq!(g.usage.cache_read_input_tokens, p, "later replies reuse it");
        assert_eq!(g.usage.cache_creation_input_tokens, 0);
    }
    for g in &reused {
        assert!(!g.text.is_empty());
        assert!(g.usage.output_tokens > 0 && g.usage.output_tokens <= 24);
        assert_eq!(g.finish == Finish::Length, g.usage.output_tokens == 24);
    }

    // Without reuse: the same replies, with the prefix run for each one.
    llm.set_prefix_reuse(false);
    let again: Vec<_> = llm
        .generate_shared(prompt(&prefix, &suffixes), &|_, _| {})
        .await
        .into_iter()
        .map(|r| r.expect("reply"))
        .collect();
    let texts = |v: &[crate::Generation]| v.iter().map(|g| g.text.clone()).collect::<Vec<_>>();
    assert_eq!(texts(&reused), texts(&again));
    assert!(llm.stats().prefill_tokens - with_reuse > with_reuse + p);
    // One reply at a time after the shared prefix: the same replies and usage as side by
    // side (greedy decoding; a row's products do not depend on the other rows of a pass).
    llm.set_prefix_reuse(true);
    llm.set_batch(1);
    let one_by_one: Vec<_> = llm
        .generate_shared(prompt(&prefix, &suffixes), &|_, _| {})
        .await
        .into_iter()
        .map(|r| r.expect("reply"))
        .collect();
    assert_eq!(one_by_one, reused);
    llm.set_batch(2);
    // The last reply alone, from a fresh prefix: earlier replies left nothing in the shared
    // cache.
    llm.set_prefix_reuse(true);
    let alone = llm
        .generate_shared(prompt(&prefix, &suffixes[2..]), &|_, _| {})
        .await
        .remove(0)
        .expect("reply");
    assert_eq!(alone.text, reused[2].text);
}

#[tokio::test]
async fn the_llm_contextualizer_checks_and_records_every_context() {
    struct Recorder(Mutex<Vec<(usize, ContextStatus)>>);
    impl ContextSink for Recorder {
        fn finished(&self, chunk: usize, context: &ChunkContext, _: &TokenUsage) {
            self.0.lock().expect("lock").push((chunk, context.status));
        }
    }
    let c = LlmContextualizer::new(Box::new(smollm2())).with_max_tokens(48);
    let kind = DocKind::Markdown;
    let doc = DocumentView {
        id: "acme.md",
        source: "acme.md",
        title: Some("ACME Corp quarterly report, Q2 2023"),
        language: Language::En,
        kind: &kind,
        text: DOC,
        content_hash: "h",
    };
    let secs = sections();
    let chunks: Vec<ChunkView<'_>> = secs
        .iter()
        .map(|(s, t)| ChunkView { span: s, text: t })
        .collect();
    let sink = Recorder(Mutex::new(Vec::new()));
    let out = c.contextualize(doc, &chunks, &sink).await.expect("runs");
    assert_eq!(out.contexts.len(), 3);
    let mut seen = sink.0.into_inner().expect("lock");
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        out.contexts
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.status))
            .collect::<Vec<_>>()
    );
    for (ctx, chunk) in out.contexts.iter().zip(&chunks) {
        let p = ctx.provenance.as_ref().expect("provenance");
        assert_eq!(p.method, situate_core::ContextMethod::Llm);
        assert_eq!(p.model.as_deref(), Some("local:smollm2-test"));
        assert_eq!(p.prompt_version.as_deref(), Some("anthropic-v1"));
        assert_eq!(p.strategy.as_deref(), Some("whole"));
        assert_eq!(p.input_hash, c.input_hash(&doc, chunk));
        let text = ctx.text.as_deref().expect("a reply");
        let verdict = crate::verify::verify(text, chunk.text, DOC, false);
        match ctx.status {
            ContextStatus::Verified => assert!(verdict.passed(), "{:?}", verdict.reasons),
            ContextStatus::Rejected => assert!(!ctx.notes.is_empty()),
            other => panic!("unexpected status {other:?}: {:?}", ctx.notes),
        }
    }
    assert!(out.usage.cache_creation_input_tokens > 0 && out.usage.cache_read_input_tokens > 0);

    // A document budget smaller than the document: windows, recorded on the card.
    let c = LlmContextualizer::new(Box::new(smollm2()))
        .with_max_tokens(16)
        .with_document_tokens(Some(60));
    let out = c
        .contextualize(doc, &chunks[2..], &situate_core::NoSink)
        .await
        .expect("runs");
    let strategy = out.contexts[0]
        .provenance
        .as_ref()
        .and_then(|p| p.strategy.clone())
        .expect("strategy");
    assert!(strategy.starts_with("window:"), "{strategy}");
}

/// situate's forward pass ([`crate::decoder`]) against candle-transformers' llama on the real
/// SmolLM2: the same next token after a 300-token prompt read in two pieces and after each of
/// a few generated tokens, with logits close (candle quantizes the activations to 8 bits for
/// every matrix product; situate reads prompts with f32 copies of the matrices).
#[test]
fn the_forward_pass_agrees_with_candles_llama_on_smollm2() {
    use candle_core::quantized::gguf_file;
    use candle_core::{Device, Tensor};
    let path = smollm2_path();
    assert!(
        path.is_file(),
        "SmolLM2 is not installed at {}",
        path.display()
    );
    let dev = Device::Cpu;
    let mut file = std::fs::File::open(&path).expect("opens");
    let ct = gguf_file::Content::read(&mut file).expect("reads");
    let (ct, bytes) = crate::local::widen_slow_quantizations(&ct, &mut file, &dev)
        .expect("widens")
        .expect("SmolLM2 ships Q4_1 matrices");
    let mut ours = {
        let mut r = std::io::Cursor::new(&bytes);
        crate::decoder::Decoder::from_gguf(&ct, &mut r, "llama", 1024, &dev).expect("ours")
    };
    let mut theirs = {
        let mut r = std::io::Cursor::new(&bytes);
        candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct, &mut r, &dev)
            .expect("candle's")
    };
    let llm = smollm2();
    let ids: Vec<u32> = llm
        .tokenizer()
        .encode(DOC.repeat(3), false)
        .expect("encodes")
        .get_ids()
        .iter()
        .copied()
        .take(300)
        .collect();
    assert_eq!(ids.len(), 300);
    let argmax = |t: &Tensor| -> u32 {
        t.flatten_all()
            .and_then(|t| t.argmax(0))
            .and_then(|t| t.to_scalar())
            .expect("argmax")
    };
    let diff = |a: &Tensor, b: &Tensor| -> f32 {
        let a: Vec<f32> = a.flatten_all().and_then(|t| t.to_vec1()).expect("a");
        let b: Vec<f32> = b.flatten_all().and_then(|t| t.to_vec1()).expect("b");
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    };
    let run =
        |m: &mut candle_transformers::models::quantized_llama::ModelWeights, t: &[u32], pos| {
            m.forward(
                &Tensor::new(t, &dev)
                    .and_then(|t| t.unsqueeze(0))
                    .expect("x"),
                pos,
            )
            .expect("candle's forward")
        };
    ours.forward(&ids[..200]).expect("ours");
    run(&mut theirs, &ids[..200], 0);
    let mut a = ours.forward(&ids[200..]).expect("ours");
    let mut b = run(&mut theirs, &ids[200..], 200);
    let mut worst: f32 = 0.0;
    for step in 0..6 {
        worst = worst.max(diff(&a, &b));
        let next = argmax(&b);
        assert_eq!(argmax(&a), next, "step {step}: a different next token");
        a = ours.forward(&[next]).expect("ours");
        b = run(&mut theirs, &[next], 300 + step);
    }
    eprintln!("largest logit difference: {worst}");
    assert!(worst < 3.0, "logits differ by up to {worst}");
}

#[tokio::test]
async fn yes_no_judgements_are_probabilities_and_do_not_depend_on_prefix_reuse() {
    let mut llm = smollm2();
    let prefix = "Answer \"yes\" if the passage answers the question, otherwise \"no\".\n\n\
                  <query>\nHow much did ACME's revenue grow in Q2 2023?\n</query>\n\n";
    // Four rounds of the three sections: more passage tokens than one side-by-side group
    // holds, so the passages are judged in several groups.
    let mut suffixes: Vec<String> = (1..=4)
        .flat_map(|round| {
            sections().into_iter().map(move |(_, t)| {
                format!("<passage>\n(Copy {round}) {t}\n</passage>\n\nDoes the passage answer the question? Answer only yes or no.")
            })
        })
        .collect();
    // A passage longer than the window, among them: its own error, the others judged.
    suffixes.insert(4, "<passage>\nanvil ".repeat(9000));
    let prompt = SharedPrompt {
        system: None,
        prefix,
        suffixes: &suffixes,
        max_tokens: 1,
    };
    let mut reused = llm.judge_shared(prompt).await;
    assert_eq!(reused.len(), 13);
    assert!(
        matches!(reused.remove(4), Err(crate::LlmError::TooLong { .. })),
        "the long passage is refused"
    );
    let reused: Vec<f32> = reused.into_iter().map(|r| r.expect("judgement")).collect();
    assert!(reused.iter().all(|p| (0.0..=1.0).contains(p)), "{reused:?}");
    let mut distinct = reused.clone();
    distinct.dedup();
    assert!(
        distinct.len() > 1,
        "the passages are told apart: {reused:?}"
    );
    llm.set_prefix_reuse(false);
    let mut fresh = llm.judge_shared(prompt).await;
    assert!(matches!(
        fresh.remove(4),
        Err(crate::LlmError::TooLong { .. })
    ));
    let fresh: Vec<f32> = fresh.into_iter().map(|r| r.expect("judgement")).collect();
    assert_eq!(fresh.len(), reused.len());
    for (a, b) in reused.iter().zip(&fresh) {
        assert!((a - b).abs() < 1e-3, "{reused:?} vs {fresh:?}");
    }
    // The judgement is the model's own first-token choice made continuous: a reply
    // generated greedily from the same prompt starts with the likelier answer.
    llm.set_prefix_reuse(true);
    let replies = llm
        .generate_shared(
            SharedPrompt {
                max_tokens: 2,
                ..prompt
            },
            &|_, _| {},
        )
        .await;
    let mut replies = replies;
    assert!(replies.remove(4).is_err());
    for (r, p) in replies.into_iter().zip(&reused) {
        let text = r.expect("reply").text;
        if let Some(v) = crate::yes_no(&text) {
            assert_eq!(v > 0.5, *p > 0.5, "{text:?} against P(yes) = {p}");
        }
    }
}
