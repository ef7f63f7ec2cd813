//! The LLM judge: scripted LLMs, and hosted LLMs against fake servers.

use super::*;
use crate::llm::LlmReranker;
use serde_json::json;
use situate_core::Reranker;
use situate_http::fake::{FakeServer, Reply};
use situate_llm::{Generation, Llm, LlmError, OnReply, SharedPrompt, TokenUsage};

/// An LLM whose judgement is scripted: P(yes) = the share of query words in the passage.
struct ScriptedJudge {
    prompts: std::sync::Mutex<Vec<(String, Vec<String>)>>,
}

#[async_trait::async_trait]
impl Llm for ScriptedJudge {
    fn id(&self) -> &str {
        "scripted"
    }
    fn window(&self) -> usize {
        8192
    }
    fn count_tokens(&self, text: &str) -> usize {
        text.len() / 4
    }
    fn prefix_caching(&self) -> situate_llm::PrefixCaching {
        situate_llm::PrefixCaching::Local
    }
    async fn generate_shared(
        &self,
        prompt: SharedPrompt<'_>,
        _on_reply: OnReply<'_>,
    ) -> Vec<Result<Generation, LlmError>> {
        // Replies for the text-reading default: yes when the passage says "revenue".
        prompt
            .suffixes
            .iter()
            .map(|s| {
                let text = if s.contains("broken") {
                    "Perhaps".to_string()
                } else if s.contains("revenue") {
                    "Yes.".to_string()
                } else {
                    "no".to_string()
                };
                Ok(Generation {
                    text,
                    usage: TokenUsage::default(),
                    finish: situate_llm::Finish::Stop,
                })
            })
            .collect()
    }
    async fn judge_shared(&self, prompt: SharedPrompt<'_>) -> Vec<Result<f32, LlmError>> {
        if let Ok(mut p) = self.prompts.lock() {
            p.push((prompt.prefix.to_string(), prompt.suffixes.to_vec()));
        }
        let query = prompt
            .prefix
            .split("<query>\n")
            .nth(1)
            .and_then(|r| r.split("\n</query>").next())
            .unwrap_or_default();
        prompt
            .suffixes
            .iter()
            .map(|s| {
                let passage = s
                    .split("<passage>\n")
                    .nth(1)
                    .and_then(|r| r.split("\n</passage>").next())
                    .unwrap_or_default();
                Ok((overlap(query, passage) / 6.0) as f32)
            })
            .collect()
    }
}

#[tokio::test]
async fn the_llm_judge_shares_the_query_and_marks_the_context() {
    let llm = ScriptedJudge {
        prompts: Default::default(),
    };
    let r = LlmReranker::new(Box::new(llm), 20);
    let passages = five();
    let scores = r
        .score("how much did the revenue grow", &passages)
        .await
        .expect("scores");
    // "the revenue grew" scores 2/6, the whole query 6/6; the long one is cut at 20 chars.
    assert_eq!(scores[1], 2.0 / 6.0);
    assert!(
        scores[4] > 0.6 && scores[4] < 1.0,
        "{scores:?}: the passage was cut at 20 characters"
    );
    let p = LlmReranker::prefix("how much did the revenue grow");
    assert!(p.contains("<query>\nhow much did the revenue grow\n</query>"));
    let s = r.suffix(&passages[1]);
    assert!(
        s.starts_with("<context>\nfrom acme\n</context>\n<passage>\nthe revenue grew\n</passage>"),
        "{s}"
    );
    assert!(!r.suffix(&passages[0]).contains("<context>"));
    assert!(r.suffix(&passages[4]).contains("[…]"));
    assert!(r.id().starts_with("llm:scripted"));
}

#[tokio::test]
async fn a_judgement_read_from_text_is_one_or_zero_and_nonsense_is_an_error() {
    struct TextOnly(ScriptedJudge);
    #[async_trait::async_trait]
    impl Llm for TextOnly {
        fn id(&self) -> &str {
            "text-only"
        }
        fn window(&self) -> usize {
            8192
        }
        fn count_tokens(&self, text: &str) -> usize {
            text.len() / 4
        }
        fn prefix_caching(&self) -> situate_llm::PrefixCaching {
            situate_llm::PrefixCaching::Automatic
        }
        async fn generate_shared(
            &self,
            prompt: SharedPrompt<'_>,
            on_reply: OnReply<'_>,
        ) -> Vec<Result<Generation, LlmError>> {
            self.0.generate_shared(prompt, on_reply).await
        }
    }
    let r = LlmReranker::new(
        Box::new(TextOnly(ScriptedJudge {
            prompts: Default::default(),
        })),
        2000,
    );
    let scores = r.score("q", &five()[..3]).await.expect("scores");
    assert_eq!(scores, vec![0.0, 1.0, 1.0]);
    let e = r
        .score("q", &[passage("broken", None)])
        .await
        .expect_err("nonsense");
    assert!(
        e.to_string().contains("passage 1") && e.to_string().contains("Perhaps"),
        "{e}"
    );
}

#[tokio::test]
async fn hosted_llm_judges_read_logprobs_or_the_reply() {
    use situate_llm::hosted::HostedLlm;
    // OpenAI-compatible: top_logprobs of the first token.
    let server = FakeServer::start(|req, _| {
        let b = req.json();
        let content = b["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (yes, no) = if content.contains("the revenue grew") {
            (-0.1, -2.4)
        } else {
            (-3.0, -0.05)
        };
        Reply::json(json!({
            "choices": [{"message": {"content": "Yes"}, "finish_reason": "length",
                "logprobs": {"content": [{"token": "Yes", "logprob": yes, "top_logprobs": [
                    {"token": "Yes", "logprob": yes}, {"token": " yes", "logprob": yes - 3.0},
                    {"token": "No", "logprob": no}, {"token": "Maybe", "logprob": -6.0}]}]}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 1}
        }))
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!("openai:gpt-x?base_url={}", server.url()),
        &env_with(&[]),
    )
    .expect("spec");
    let r = LlmReranker::new(Box::new(llm), 2000);
    let scores = r
        .score("how much did the revenue grow", &five()[..2])
        .await
        .expect("scores");
    let share = |y: f64, n: f64| {
        let yes = y.exp() + (y - 3.0).exp();
        (yes / (yes + n.exp())) as f32
    };
    assert!((scores[1] - share(-0.1, -2.4)).abs() < 1e-5, "{scores:?}");
    assert!((scores[0] - share(-3.0, -0.05)).abs() < 1e-5, "{scores:?}");
    let req = &server.requests()[0];
    let b = req.json();
    assert_eq!(b["logprobs"], true);
    assert_eq!(b["max_tokens"], 1);
    // Anthropic exposes no token probabilities: the reply's text decides.
    let server = FakeServer::start(|req, _| {
        let b = req.json();
        let text = if b.to_string().contains("the revenue grew") {
            "Yes"
        } else {
            "No."
        };
        Reply::json(json!({
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 1}
        }))
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!("anthropic:claude-x?base_url={}", server.url()),
        &env_with(&[]),
    )
    .expect("spec");
    let r = LlmReranker::new(Box::new(llm), 2000);
    let scores = r.score("q", &five()[..2]).await.expect("scores");
    assert_eq!(scores, vec![0.0, 1.0]);
    // The query and instruction are the cached block; the passage follows.
    let b = server.requests()[0].json();
    assert!(
        b["messages"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("<query>"))
    );
    assert!(b["messages"][0]["content"][0]["cache_control"].is_object());
}
