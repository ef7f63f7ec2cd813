//! Chat templates: how a system message and one user turn are laid out for a model, and
//! which tokens end the model's turn.
//!
//! Recognised from the GGUF's `tokenizer.chat_template` (a Jinja template) by the markers it
//! uses rather than by running Jinja: the few families below cover the models situate runs,
//! and a template engine with Python string methods is a large dependency for four layouts.

/// A chat layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Template {
    /// `<|im_start|>role\n...<|im_end|>` (SmolLM2, Qwen2, many others); `default_system` is
    /// the system message the template adds when none is given.
    ChatMl {
        /// The template's own system message, if it adds one.
        default_system: Option<String>,
        /// Qwen3: an empty thinking block opens the reply (its non-thinking mode).
        empty_think: bool,
    },
    /// `<start_of_turn>user\n...<end_of_turn>` (Gemma); a system message is put at the start
    /// of the user turn, as Gemma's template does.
    Gemma,
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>` (Llama 3).
    Llama3,
}

impl Template {
    /// The template for a model, from its chat template text (if the file has one) and its
    /// architecture.
    pub fn detect(chat_template: Option<&str>, architecture: &str) -> Template {
        let t = chat_template.unwrap_or_default();
        if t.contains("<start_of_turn>") || (t.is_empty() && architecture.starts_with("gemma")) {
            return Template::Gemma;
        }
        if t.contains("<|start_header_id|>") {
            return Template::Llama3;
        }
        // The template's literal system message, written with a real or an escaped newline.
        let default_system = ["<|im_start|>system\n", "<|im_start|>system\\n"]
            .iter()
            .find_map(|open| {
                let i = t.find(open)?;
                let rest = &t[i + open.len()..];
                let s = &rest[..rest.find("<|im_end|>")?];
                // Only a literal message, not a Jinja expression.
                (!s.contains("{{") && !s.contains("{%") && !s.contains('\''))
                    .then(|| s.replace("\\n", "\n"))
            });
        Template::ChatMl {
            default_system,
            empty_think: t.contains("<think>") || architecture == "qwen3",
        }
    }

    /// The text before a user message and the text after it up to where the reply starts.
    pub fn user_turn(&self, system: Option<&str>) -> (String, String) {
        match self {
            Template::ChatMl {
                default_system,
                empty_think,
            } => {
                let mut open = String::new();
                if let Some(s) = system.or(default_system.as_deref()) {
                    open.push_str(&format!("<|im_start|>system\n{s}<|im_end|>\n"));
                }
                open.push_str("<|im_start|>user\n");
                let mut close = "<|im_end|>\n<|im_start|>assistant\n".to_string();
                if *empty_think {
                    close.push_str("<think>\n\n</think>\n\n");
                }
                (open, close)
            }
            Template::Gemma => {
                let mut open = "<bos><start_of_turn>user\n".to_string();
                if let Some(s) = system {
                    open.push_str(s);
                    open.push_str("\n\n");
                }
                (open, "<end_of_turn>\n<start_of_turn>model\n".into())
            }
            Template::Llama3 => {
                let mut open = "<|begin_of_text|>".to_string();
                if let Some(s) = system {
                    open.push_str(&format!(
                        "<|start_header_id|>system<|end_header_id|>\n\n{s}<|eot_id|>"
                    ));
                }
                open.push_str("<|start_header_id|>user<|end_header_id|>\n\n");
                (
                    open,
                    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n".into(),
                )
            }
        }
    }

    /// Tokens (as text) that end the model's turn.
    pub fn stop_markers(&self) -> &'static [&'static str] {
        match self {
            Template::ChatMl { .. } => &["<|im_end|>", "<|endoftext|>"],
            Template::Gemma => &["<end_of_turn>", "<eos>"],
            Template::Llama3 => &["<|eot_id|>", "<|end_of_text|>"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn chatml_keeps_the_templates_default_system_message() {
        // GGUF files hold the template with real newlines; some keep them escaped.
        let real = Template::detect(Some(&SMOLLM2.replace("\\n", "\n")), "llama");
        let t = Template::detect(Some(SMOLLM2), "llama");
        assert_eq!(real, t);
        let (open, close) = t.user_turn(None);
        assert_eq!(
            format!("{open}Hi{close}"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let (open, _) = t.user_turn(Some("Be brief."));
        assert!(open.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n"));
        assert_eq!(t.stop_markers()[0], "<|im_end|>");
    }

    #[test]
    fn other_families_are_recognised() {
        assert_eq!(
            Template::detect(Some("{{ '<start_of_turn>' + role }}"), "gemma3"),
            Template::Gemma
        );
        assert_eq!(Template::detect(None, "gemma3"), Template::Gemma);
        assert_eq!(
            Template::detect(Some("<|start_header_id|>"), "llama"),
            Template::Llama3
        );
        let q = Template::detect(Some("<|im_start|>{{ x }}<think>"), "qwen3");
        assert!(q.user_turn(None).1.ends_with("<think>\n\n</think>\n\n"));
        let (open, close) = Template::Gemma.user_turn(Some("S"));
        assert_eq!(
            format!("{open}U{close}"),
            "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
