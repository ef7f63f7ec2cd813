//! Checks every generated context must pass before it is indexed.
//!
//! A wrong context is worse than none: it is indexed beside the chunk and sends queries to
//! it. So each context is checked against its source, and one that fails a check is stored
//! as `rejected` with the reasons (and not indexed; the chunk falls back to its original):
//!
//! - **length**: at least 3 words and at most [`MAX_WORDS`]; a reply cut at the token limit
//!   is rejected too;
//! - **language**: the same script as the chunk's (Latin, Cyrillic, Han, ...), and the same
//!   language when both are long enough to tell, or else the document's script and language
//!   (a chunk alone can mislead: whatlang calls some code French or Latin);
//! - **grounding**: every number, identifier (`snake_case`, `camelCase`, `a.b`, `a::b`,
//!   letters mixed with digits) and capitalised name (not opening a sentence) occurs in the
//!   document;
//! - **not a copy** of the chunk (most of its word 4-grams taken from the chunk);
//! - **no chatter or refusal** ("As an AI", "Here is the context", "I cannot", ...), nor
//!   the prompt's own instruction echoed back ("to situate this chunk", "search retrieval");
//! - **no loop**: a phrase repeated three times or more (small models do this);
//! - **says something**: at least two words that are neither function words nor the task's
//!   own ("chunk", "document", "situate", "concise context", "search"...): 48 of the 0.5B
//!   Qwen's 737 notes on Anthropic's codebase set were the task said back and nothing else.
//!
//! Replies are first cleaned of what models commonly wrap them in (a `Context:` label,
//! quotes, `<context>` tags) and of what small models add to a good context: the prompt's
//! purpose echoed as a trailing clause ("…, for the purpose of improving search retrieval of
//! the chunk") and sentences about the task rather than the document ("This context helps
//! situate the chunk within the overall document."), when what is left still says
//! something; the cleaned text is what is stored. A reply that is nothing but such talk is
//! rejected as chatter.

use regex::Regex;
use std::collections::HashSet;
use std::sync::OnceLock;

/// The most words a context may have (the prompt asks for 50–100 tokens).
pub const MAX_WORDS: usize = 150;

/// The outcome of the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The cleaned context.
    pub text: String,
    /// Why it was rejected (empty: verified).
    pub reasons: Vec<String>,
}

impl Verdict {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.reasons.is_empty()
    }
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).unwrap_or_else(|e| unreachable!("{pattern}: {e}")))
}

/// The Russian prompts said back: the description's ([`crate::document::DESCRIBE_PROMPT_RU`]),
/// in any case of its list, and the note's ([`crate::prompt::NOTE_TEMPLATE_RU`]): a sentence
/// of it is task talk, and a reply of nothing else chatter.
macro_rules! ru_prompt_echo {
    () => {
        r"что\s+это\s+за\s+(текст|документ)|люд\w*,\s+организаци\w*,\s+мест|организаци\w*,\s+мест\w*,\s+продукт|к\s+чему\s+относится\s+этот\s+фрагмент|имен\w*\s+или\s+названи\w*\s+из\s+(него|документа)|о\s+которых\s+ид[её]т\s+речь\s+во\s+фрагменте|вот\s+фрагмент|ответь\s+только"
    };
}

/// Strips the wrappers models put around an answer.
pub fn clean(reply: &str) -> String {
    static TAGS: OnceLock<Regex> = OnceLock::new();
    static LABEL: OnceLock<Regex> = OnceLock::new();
    let mut s = re(&TAGS, r"(?i)</?(context|answer)>")
        .replace_all(reply, "")
        .to_string();
    s = re(
        &LABEL,
        r"(?i)^\s*(\*\*)?(succinct\s+)?context(\*\*)?\s*:\s*",
    )
    .replace(&s, "")
    .to_string();
    let t = s.trim();
    let t = t
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(t);
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    without_task_talk(&t).unwrap_or(t)
}

/// `text` without the prompt's purpose echoed as a clause and without sentences about the
/// task, if at least one sentence of three words or more is left; `None` otherwise (or when
/// there is nothing to take out).
fn without_task_talk(text: &str) -> Option<String> {
    static ECHO: OnceLock<Regex> = OnceLock::new();
    static META: OnceLock<Regex> = OnceLock::new();
    static ABOUT: OnceLock<Regex> = OnceLock::new();
    // "…, for the purpose(s) of improving (the) search retrieval (of the chunk)", "…, to
    // improve search retrieval", "…, which is useful for search retrieval".
    let echo = re(
        &ECHO,
        r"(?i)(,\s*(which|this|that)\s+(is|are|will be|can be)\s+(useful|important|helpful|relevant)\s+(for|to|in)\s+|,\s*(in order\s+)?(for|to)\s+|\s+(for|to)\s+the\s+purposes?\s+of\s+)(the\s+)?(purposes?\s+of\s+)?((improv|enhanc|aid|help|facilitat|support)\w*\s+)*(the\s+)?search(\s+and)?\s+retrieval(\s+of\s+(the|this)\s+chunk)?",
    );
    let meta = re(
        &META,
        concat!(
            r"(?i)situat\w*\s+(this|the)\s+chunk|succinct\s+context|search\s+retrieval|(sit\w*|is situated|is placed|fits|belongs)\s+within\s+the\s+(overall\s+|whole\s+|entire\s+)?document|^this\s+context\b|intended\s+to\s+(provide|give|help|improve|situate)|",
            ru_prompt_echo!()
        ),
    );
    // A sentence about the task whose end says what the chunk is about ("This chunk
    // sits within the document … by providing a concise context about the Northwind
    // report, Q3 2024, …") keeps that end.
    let about = re(
        &ABOUT,
        r"(?i)^.*?\b(context|summary|overview|information|details)\s+(about|of|on|regarding)\s+(?P<rest>.+)$",
    );
    let cut = echo.replace_all(text, "").to_string();
    let kept: Vec<String> = sentences(&cut)
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            if !meta.is_match(s) {
                return Some(s.to_string());
            }
            let rest = about.captures(s)?.name("rest")?.as_str().trim();
            (rest.split_whitespace().count() >= 3 && !meta.is_match(rest)).then(|| {
                let mut c = rest.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect())
                    .unwrap_or_default()
            })
        })
        .collect();
    let out = kept.join(" ");
    let words = kept
        .iter()
        .map(|s| s.split_whitespace().count())
        .max()
        .unwrap_or(0);
    (out != text && words >= 3).then_some(out)
}

/// Checks `reply` (a context for `chunk` of `document`). `truncated` says the model stopped
/// at its token limit.
pub fn verify(reply: &str, chunk: &str, document: &str, truncated: bool) -> Verdict {
    let text = clean(reply);
    let mut reasons = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() < 3 {
        reasons.push(format!("too short ({} words)", words.len()));
    }
    if words.len() > MAX_WORDS {
        reasons.push(format!(
            "too long ({} words, at most {MAX_WORDS})",
            words.len()
        ));
    }
    if truncated {
        reasons.push("cut off at the token limit".into());
    }
    if let Some(r) = chatter(&text) {
        reasons.push(format!("chatter or refusal ({r:?})"));
    } else if words.len() >= 3 && content_words(&text) < 2 {
        reasons.push("says nothing of the document or the chunk".into());
    }
    if let Some(phrase) = looping(&words) {
        reasons.push(format!("repeats itself ({phrase:?})"));
    }
    if copies(&words, chunk) {
        reasons.push("copies the chunk instead of situating it".into());
    }
    let missing = ungrounded(&text, document);
    if !missing.is_empty() {
        reasons.push(format!("not in the document: {}", missing.join(", ")));
    }
    if let Some(why) = language_mismatch(&text, chunk, document) {
        reasons.push(why);
    }
    Verdict { text, reasons }
}

/// What the checks take as the document a context must be grounded in: a line naming it
/// (its source and, for code, its language) before its text, since a context may rightly
/// say "this Python module" of a file that never names its language, or name the file.
///
/// Code whose language nothing names (a corpus record: Anthropic's codebase set has no file
/// names) may be called by any programming language's name ("a Rust library"): those names
/// are not facts a context could invent about the content.
pub fn checked_document(source: &str, kind: &situate_core::DocKind, text: &str) -> String {
    match kind {
        situate_core::DocKind::Code(lang) => format!(
            "{source} ({} source)\n{text}",
            situate_contextualize::display_lang(lang)
        ),
        _ if situate_contextualize::looks_like_code(text) => format!(
            "{source} (source code: {})\n{text}",
            PROGRAMMING_LANGUAGES.join(", ")
        ),
        _ => format!("{source}\n{text}"),
    }
}

/// Names of programming languages, grounded in any code of unnamed language.
#[rustfmt::skip]
const PROGRAMMING_LANGUAGES: &[&str] = &[
    "Rust", "Python", "C", "C++", "C#", "Java", "JavaScript", "TypeScript", "Go", "Golang",
    "Ruby", "PHP", "Swift", "Kotlin", "Scala", "Haskell", "Lua", "Perl", "R", "Shell",
    "Bash", "SQL", "Objective-C", "Dart", "Elixir", "Erlang", "Julia", "Zig", "OCaml",
    "Clojure", "Assembly", "WebAssembly", "HTML", "CSS", "YAML", "JSON", "TOML",
];

/// Checks `reply` as a description of `document` (`--context document`): the checks of
/// [`verify`] but the copy check (there is no chunk), with the document's own language as
/// the language to match.
///
/// The prompt asks for one or two sentences; small models go on, and often loop, after
/// them. What follows the second complete sentence is cut before the checks (a reply cut at
/// the token limit after two complete sentences is then whole).
pub fn verify_description(reply: &str, document: &str, truncated: bool) -> Verdict {
    // The document's opening stands for the chunk in the language check.
    let opening = match document.char_indices().nth(2_000) {
        Some((cut, _)) => &document[..cut],
        None => document,
    };
    let cleaned = clean(reply);
    let (kept, cut) = first_sentences(&cleaned, DESCRIPTION_SENTENCES);
    let mut v = verify(kept, "", document, truncated && !cut);
    if let Some(why) = language_mismatch(&v.text, opening, document) {
        v.reasons.push(why.replace("the chunk", "the document"));
    }
    v
}

/// Whether a description reply goes on after the sentences it keeps (so that what only
/// generation saw, a loop stopped or the token limit, happened after them).
pub fn description_is_cut(reply: &str) -> bool {
    first_sentences(&clean(reply), DESCRIPTION_SENTENCES).1
}

/// The sentences a description keeps.
pub const DESCRIPTION_SENTENCES: usize = 2;

/// The sentences of `text`, in order, each with its end mark: a sentence ends at `.`, `!`,
/// `?` or `。` followed by white space or the end of the text, so that "v2.5" and
/// "`Config.load`" do not end one.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !matches!(c, '.' | '!' | '?' | '。') {
            continue;
        }
        let end = i + c.len_utf8();
        if chars.peek().is_none_or(|(_, n)| n.is_whitespace()) || c == '。' {
            out.push(&text[start..end]);
            start = end;
        }
    }
    if !text[start..].trim().is_empty() {
        out.push(&text[start..]);
    }
    out
}

/// The first `n` sentences of `text`, and whether anything followed them.
fn first_sentences(text: &str, n: usize) -> (&str, bool) {
    let all = sentences(text);
    if all.len() <= n {
        return (text, false);
    }
    let end: usize = all[..n].iter().map(|s| s.len()).sum();
    (text[..end].trim_end(), true)
}

/// A stored LLM context (verified or rejected) checked again with these checks: its new
/// status and reasons. What only generation could tell is kept from the stored reasons (a
/// reply cut at the token limit, a loop stopped while decoding). Other contexts (manual,
/// failed, pending, without text) are returned as they are.
pub fn recheck(
    context: situate_core::ChunkContext,
    chunk: &str,
    document: &str,
) -> situate_core::ChunkContext {
    let is_llm = context
        .provenance
        .as_ref()
        .is_some_and(|p| p.method == situate_core::ContextMethod::Llm);
    if !is_llm {
        return context;
    }
    recheck_with(
        context,
        |text, truncated| verify(text, chunk, document, truncated),
        |_| true,
    )
}

/// A cached description (verified or rejected) checked again with
/// [`verify_description`]; a loop stopped after the sentences it keeps no longer counts.
pub fn recheck_description(
    context: situate_core::ChunkContext,
    document: &str,
) -> situate_core::ChunkContext {
    recheck_with(
        context,
        |text, truncated| verify_description(text, document, truncated),
        |text| !description_is_cut(text),
    )
}

/// `context` (when verified or rejected, with a text) checked again by `check`, given
/// whether it was cut at the token limit; a loop stopped while decoding is kept among the
/// reasons when `stop_counts` says so of its text.
fn recheck_with(
    context: situate_core::ChunkContext,
    check: impl FnOnce(&str, bool) -> Verdict,
    stop_counts: impl FnOnce(&str) -> bool,
) -> situate_core::ChunkContext {
    use situate_core::ContextStatus;
    let decided = matches!(
        context.status,
        ContextStatus::Verified | ContextStatus::Rejected
    );
    let Some(text) = context.text.as_deref().filter(|_| decided) else {
        return context;
    };
    let truncated = context.notes.iter().any(|n| n.contains("token limit"));
    let mut v = check(text, truncated);
    if stop_counts(text) {
        for kept in context.notes.iter().filter(|n| n.ends_with("(stopped)")) {
            if !v.reasons.contains(kept) {
                v.reasons.push(kept.clone());
            }
        }
    }
    let status = if v.passed() {
        ContextStatus::Verified
    } else {
        ContextStatus::Rejected
    };
    situate_core::ChunkContext {
        text: Some(v.text),
        status,
        provenance: context.provenance,
        notes: v.reasons,
    }
}

fn chatter(text: &str) -> Option<String> {
    static CHATTER: OnceLock<Regex> = OnceLock::new();
    re(
        &CHATTER,
        concat!(
            r"(?i)\b(as an ai|language model|i cannot|i can't|i'm sorry|i am sorry|i apologi[sz]e|here is the|here's the|here is a|here's a|sure[,!]|certainly[,!]|i hope this|let me know|succinct context|situate (this|the) chunk|search retrieval|",
            ru_prompt_echo!(),
            r")|</?(chunk|document)>"
        ),
    )
    .find(text)
    .map(|m| m.as_str().to_string())
}

/// Words of `text` that say something of a document: not function words and not the
/// words of the task itself ("This chunk sitsuate within the document to provide a concise
/// context for searching for the chunk." has none; "… to situate the `Loop` instruction
/// within the `createCodeSec` function" has four).
fn content_words(text: &str) -> usize {
    static TASK: OnceLock<Regex> = OnceLock::new();
    let task = re(
        &TASK,
        r"^(the|a|an|this|that|these|those|it|its|is|are|was|be|being|been|to|of|for|in|within|on|at|by|with|and|or|as|which|from|into|about|whole|overall|entire|chunks?|documents?|contexts?|sit\w*|situat\w*|provid\w*|gives?|giving|concise|succinct|short|brief|search\w*|retriev\w*|improv\w*|enhanc\w*|purposes?|help\w*|part|section|text|information|content|helps?|better|order|used?|can|will)$",
    );
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty() && !task.is_match(&w.to_lowercase()))
        .count()
}

/// A run of 3+ words that occurs three times or more.
fn looping(words: &[&str]) -> Option<String> {
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    for n in [6usize, 4, 3] {
        let mut seen: std::collections::HashMap<&[String], usize> = Default::default();
        for g in lower.windows(n) {
            let c = seen.entry(g).or_default();
            *c += 1;
            if *c >= 3 {
                return Some(g.join(" "));
            }
        }
    }
    None
}

fn normal_words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Most of the context's word 4-grams come from the chunk (or the context is inside it).
fn copies(words: &[&str], chunk: &str) -> bool {
    let ctx = normal_words(&words.join(" "));
    let chk = normal_words(chunk);
    if ctx.len() < 4 {
        return !ctx.is_empty() && chk.windows(ctx.len()).any(|w| w == ctx.as_slice());
    }
    let grams: HashSet<&[String]> = chk.windows(4).collect();
    let shared = ctx.windows(4).filter(|g| grams.contains(g)).count();
    shared * 10 >= (ctx.len() - 3) * 7
}

/// Numbers, identifiers and capitalised names of the context that the document lacks.
fn ungrounded(text: &str, document: &str) -> Vec<String> {
    static NUMBER: OnceLock<Regex> = OnceLock::new();
    static IDENT: OnceLock<Regex> = OnceLock::new();
    static NAME: OnceLock<Regex> = OnceLock::new();
    let doc_lower = document.to_lowercase();
    let mut missing = Vec::new();
    let mut check = |token: &str, case_sensitive: bool| {
        let found = if case_sensitive {
            document.contains(token)
        } else {
            doc_lower.contains(&token.to_lowercase())
        };
        if !found && !missing.iter().any(|m: &String| m == token) {
            missing.push(token.to_string());
        }
    };
    for m in re(&NUMBER, r"\d+(?:[.,]\d+)*").find_iter(text) {
        check(m.as_str(), true);
    }
    for m in re(
        &IDENT,
        r"[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)+|\b[A-Za-z]*_[A-Za-z0-9_]+\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b|\b[A-Za-z]+[0-9][A-Za-z0-9]*\b",
    )
    .find_iter(text)
    {
        // Any case: a note that writes `Date32` as `date32` paraphrases, it does not invent.
        // A qualified name (`Host::WasiCryptoMock`, `config.load`) whose every part is in
        // the document puts together what the document says in two places.
        let t = m.as_str().trim_end_matches('.');
        let parts_grounded = (t.contains("::") || t.contains('.'))
            && t
                .split("::")
                .flat_map(|p| p.split('.'))
                .all(|p| !p.is_empty() && doc_lower.contains(&p.to_lowercase()));
        if !t.is_empty() && !parts_grounded {
            check(t, false);
        }
    }
    for m in re(&NAME, r"\b\p{Lu}[\p{L}\p{N}-]*").find_iter(text) {
        let before = text[..m.start()].trim_end();
        let opens_sentence = before.is_empty()
            || before.ends_with(['.', '!', '?', ':', ';', '\n', '"', '(', '«', '“']);
        if !opens_sentence {
            // A hyphenated name is grounded when each of its capitalised words is
            // ("Octal-encoded" of a document that says "octal encoded", "Windows-specific"
            // of one that names Windows): the lower-case rest is English ("-specific",
            // "-based", "-encoded").
            let name = m.as_str().trim_end_matches('-');
            if (!name.contains('-')
                || !name
                    .split('-')
                    .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
                    .all(|w| doc_lower.contains(&w.to_lowercase())))
                && !declined_in(name, &doc_lower)
            {
                check(name, false);
            }
        }
    }
    missing
}

/// Whether the Cyrillic `name` is in `doc_lower` (the document, lower-cased) by its Russian
/// Snowball stem: Russian declines names, so a context that speaks "о Войцехе Богуславском"
/// of a text that says "Войцех Богуславский" does not repeat the document's letters. Stems
/// shorter than four letters are not taken (they match inside too many words).
fn declined_in(name: &str, doc_lower: &str) -> bool {
    let cyrillic = |c: char| ('\u{0400}'..='\u{04FF}').contains(&c);
    if !name.chars().all(cyrillic) {
        return false;
    }
    let lower = name.to_lowercase();
    let stem = frostem::Stemmer::new(frostem::Algorithm::Russian)
        .stem(&lower)
        .into_owned();
    stem.chars().count() >= 4 && doc_lower.contains(&stem)
}

/// The context's script or language differs from both the chunk's and the document's.
/// Scripts are told apart on short texts too (an English reply to a Russian sentence);
/// languages need both texts long enough and whatlang sure of both. The document counts
/// too because a chunk alone can mislead: whatlang calls some code chunks French, Latin or
/// Catalan, and a note in the language of the document it situates the chunk in is right.
fn language_mismatch(text: &str, chunk: &str, document: &str) -> Option<String> {
    // Enough of the document to tell its language, at a character boundary.
    let document = match document.char_indices().nth(20_000) {
        Some((cut, _)) => &document[..cut],
        None => document,
    };
    let script = |t: &str| whatlang::detect_script(t);
    if let (Some(a), Some(b)) = (script(text), script(chunk))
        && a != b
        && script(document) != Some(a)
    {
        return Some(format!("in {a} script while the chunk is in {b} script"));
    }
    if text.chars().count() < 40 || chunk.chars().count() < 40 {
        return None;
    }
    let lang = |t: &str| {
        whatlang::detect(t)
            .filter(|i| i.is_reliable())
            .map(|i| i.lang())
    };
    let a = lang(text)?;
    let b = lang(chunk)?;
    // The document's likeliest language, sure or not: it only ever lets a note pass.
    let doc = whatlang::detect(document).map(|i| i.lang());
    (a != b && doc != Some(a))
        .then(|| format!("in {} while the chunk is in {}", a.eng_name(), b.eng_name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "ACME Corp quarterly report, Q2 2023.\n\nRevenue grew by 3% over the previous quarter, to $314 million. The growth came from the cloud_storage unit led by Maria Lopez. See parse_header and Config::load in report.rs.";
    const CHUNK: &str = "Revenue grew by 3% over the previous quarter, to $314 million.";

    fn reasons(reply: &str) -> Vec<String> {
        verify(reply, CHUNK, DOC, false).reasons
    }

    #[test]
    fn a_grounded_context_passes_and_is_cleaned() {
        let v = verify(
            "Context: \"This chunk is from ACME Corp's Q2 2023 quarterly report, on revenue growth from the cloud_storage unit led by Maria Lopez.\"",
            CHUNK,
            DOC,
            false,
        );
        assert!(v.passed(), "{:?}", v.reasons);
        assert!(v.text.starts_with("This chunk is from ACME"), "{}", v.text);
    }

    /// Small models add the prompt's purpose, or a sentence about the task, to a good
    /// context: taken out, the rest is kept and checked.
    #[test]
    fn echoes_of_the_instruction_are_cut_from_a_good_context() {
        for (reply, want) in [
            (
                "This chunk is from ACME Corp's Q2 2023 report, on revenue, for the purpose of improving search retrieval of the chunk.",
                "This chunk is from ACME Corp's Q2 2023 report, on revenue.",
            ),
            (
                "The revenue section of ACME Corp's Q2 2023 report, which is useful for improving the search retrieval of this chunk.",
                "The revenue section of ACME Corp's Q2 2023 report.",
            ),
            (
                "The revenue section of ACME Corp's Q2 2023 report. This context helps situate the chunk within the overall document.",
                "The revenue section of ACME Corp's Q2 2023 report.",
            ),
            (
                "This chunk sits within the document as its revenue part. It gives ACME Corp's Q2 2023 revenue.",
                "It gives ACME Corp's Q2 2023 revenue.",
            ),
            // Misspelt, with the purpose, then what it is about: the end is kept.
            (
                "This chunk sitsuate within the document for improved search retrieval of the chunk by providing a concise context about the ACME Corp quarterly report, Q2 2023, which includes revenue information.",
                "The ACME Corp quarterly report, Q2 2023, which includes revenue information.",
            ),
        ] {
            let v = verify(reply, CHUNK, DOC, false);
            assert_eq!(v.text, want);
            assert!(v.passed(), "{reply:?}: {:?}", v.reasons);
        }
        // A context that merely mentions retrieval in its own words is left alone.
        let v = verify(
            "ACME Corp's Q2 2023 report: the revenue paragraph.",
            CHUNK,
            DOC,
            false,
        );
        assert_eq!(v.text, "ACME Corp's Q2 2023 report: the revenue paragraph.");
    }

    #[test]
    fn a_description_keeps_its_first_two_sentences() {
        let reply = "This document is ACME Corp's Q2 2023 report, with report.rs. It covers revenue from the cloud_storage unit. The report is about revenue. The report is about revenue. The report is about";
        let v = verify_description(reply, DOC, true);
        assert_eq!(
            v.text,
            "This document is ACME Corp's Q2 2023 report, with report.rs. It covers revenue from the cloud_storage unit."
        );
        assert!(
            v.passed(),
            "the loop and the cut were after: {:?}",
            v.reasons
        );
        // Two sentences or fewer are kept whole, and a cut one is still a cut.
        let v = verify_description("ACME Corp's Q2 2023 report on revenue and", DOC, true);
        assert!(v.reasons.iter().any(|r| r.contains("token limit")), "{v:?}");
    }

    #[test]
    fn a_code_documents_language_counts_as_grounded() {
        let code = "fn main() {\n    let x = parse(input);\n    println!(\"{x}\");\n}\n";
        let say = "This document is a Rust program that parses its input and prints it.";
        // Named by its kind, or unnamed code (a corpus record): the language passes.
        for kind in [
            situate_core::DocKind::Code("rust".into()),
            situate_core::DocKind::Record,
        ] {
            let known = checked_document("doc_7", &kind, code);
            assert!(verify_description(say, &known, false).passed(), "{kind:?}");
        }
        // Prose gets no such list, and a Python file is not Rust.
        let prose = checked_document(
            "notes.txt",
            &situate_core::DocKind::Text,
            "We met on Monday.",
        );
        assert!(!verify_description(say, &prose, false).passed());
        let py = checked_document("a.py", &situate_core::DocKind::Code("python".into()), code);
        assert!(!verify_description(say, &py, false).passed());
    }

    #[test]
    fn identifiers_in_another_case_and_hyphenated_names_are_paraphrases() {
        let doc = "Types: Date32, Enum8 and IPv4. Each value is octal encoded.";
        let chunk = "Types: Date32, Enum8 and IPv4.";
        let v = verify(
            "The list of column types, such as date32, enum8 and ipv4, each Octal-encoded.",
            chunk,
            doc,
            false,
        );
        assert!(v.passed(), "{:?}", v.reasons);
        let v = verify(
            "The column types, such as date64 and Hex-encoded.",
            chunk,
            doc,
            false,
        );
        assert_eq!(v.reasons, ["not in the document: 64, date64, Hex-encoded"]);
        // The capitalised words of a compound are what must be grounded; qualified names
        // are grounded part by part.
        let doc = "namespace Host {\n// Runs on Windows only.\nclass WasiCryptoMock {};\n}";
        let v = verify(
            "A Windows-specific mock, Host::WasiCryptoMock, of the crypto host functions.",
            "class WasiCryptoMock {};",
            doc,
            false,
        );
        assert!(v.passed(), "{:?}", v.reasons);
        let v = verify(
            "A Linux-specific mock, Host::CryptoFake, of the crypto host functions.",
            "class WasiCryptoMock {};",
            doc,
            false,
        );
        assert_eq!(
            v.reasons,
            ["not in the document: Host::CryptoFake, Linux-specific"]
        );
    }

    #[test]
    fn the_russian_description_prompt_echoed_is_taken_out() {
        let doc = "Полония Варшава играет в четвёртой лиге.";
        let v = verify_description(
            "Это текст о Полонии, которая играет в четвёртой лиге. Он описывает, что это за текст, о чём он и какие люди, организации, места, продукты или программы в нём названы.",
            doc,
            false,
        );
        assert!(v.reasons.is_empty(), "{:?}", v.reasons);
        assert_eq!(
            v.text,
            "Это текст о Полонии, которая играет в четвёртой лиге."
        );
        // Nothing but the prompt said back (in any case of its list) is chatter.
        for echo in [
            "Такого текста является текстом, о чём он и какие люди, организации, места, продукты или программы в нём названы.",
            "Он описывает множество людей, организаций, мест, продуктов и программ.",
        ] {
            let v = verify_description(echo, doc, false);
            assert!(
                v.reasons.iter().any(|r| r.starts_with("chatter")),
                "{echo}: {:?}",
                v.reasons
            );
        }
    }

    #[test]
    fn the_russian_note_prompt_echoed_is_taken_out() {
        let doc = "Полония Варшава играет в четвёртой лиге. Клуб основан в 1911 году.";
        let chunk = "Клуб основан в 1911 году.";
        let v = verify(
            "Документ о клубе Полония Варшава, фрагмент говорит о годе основания. Вот фрагмент этого документа, к чему относится этот фрагмент.",
            chunk,
            doc,
            false,
        );
        assert!(v.reasons.is_empty(), "{:?}", v.reasons);
        assert_eq!(
            v.text,
            "Документ о клубе Полония Варшава, фрагмент говорит о годе основания."
        );
        for echo in [
            "Тема документа и имена или названия из него, о которых идёт речь во фрагменте.",
            "Ответь только этим предложением.",
        ] {
            let v = verify(echo, chunk, doc, false);
            assert!(
                v.reasons.iter().any(|r| r.starts_with("chatter")),
                "{echo}: {:?}",
                v.reasons
            );
        }
    }

    #[test]
    fn a_russian_name_in_another_case_is_grounded_by_its_stem() {
        let doc = "Войцех Богуславский руководил Польским театром в Варшаве.";
        let v = verify_description(
            "Это текст о Войцехе Богуславском и Польском театре в Варшаве.",
            doc,
            false,
        );
        assert!(v.reasons.is_empty(), "{:?}", v.reasons);
        // A name the document does not have, in any case, is still caught.
        let v = verify_description("Это текст о Станиславе Монюшко в Варшаве.", doc, false);
        assert_eq!(v.reasons, ["not in the document: Станиславе, Монюшко"]);
    }

    #[test]
    fn invented_numbers_names_and_identifiers_are_caught() {
        let r = reasons(
            "This chunk is from ACME Corp's Q3 2024 report by John Smith about load_config.",
        );
        let joined = r.join(" | ");
        for missing in ["2024", "Q3", "John", "Smith", "load_config"] {
            assert!(joined.contains(missing), "{missing} not flagged: {joined}");
        }
        assert!(!joined.contains("ACME"), "{joined}");
        // A capitalised word opening a sentence is not a name.
        assert!(
            reasons("From the ACME Corp report. Revenue figures for Q2 2023 are given.").is_empty()
        );
    }

    #[test]
    fn chatter_copies_loops_and_bad_lengths_are_rejected() {
        let has = |reply: &str, what: &str| {
            let r = reasons(reply);
            assert!(r.iter().any(|x| x.contains(what)), "{reply:?} → {r:?}");
        };
        has(
            "Here is the context: the ACME Corp report for Q2 2023.",
            "chatter",
        );
        has(
            "As an AI language model, I cannot see the ACME Corp document.",
            "chatter",
        );
        has(
            "This is a short context to situate this chunk within the overall document.",
            "chatter",
        );
        has(
            "The document is designed to help improve search retrieval of the chunk.",
            "chatter",
        );
        has(
            "<document> ACME Corp report for Q2 2023 </document>",
            "chatter",
        );
        has(CHUNK, "copies the chunk");
        has(
            "Revenue grew by 3% over the previous quarter, to $314 million in the report.",
            "copies",
        );
        has(
            "The report is the report. The report is the report. The report is the report.",
            "repeats",
        );
        has("Revenue.", "too short");
        // Nothing but talk about the task: rejected, not cleaned away.
        has(
            "This chunk sits within the document, for the purpose of improving search retrieval.",
            "chatter",
        );
        // The task in other words, with nothing of the document in it.
        has(
            "This chunk sitsuate within the document to provide a concise context for searching for the chunk.",
            "says nothing",
        );
        has(
            "The chunk is situated within the whole document to help search.",
            "says nothing",
        );
        // The same talk around what the chunk is: kept.
        for ok in [
            "This chunk sitsuate within the whole document to situate the Revenue figures within the ACME Corp report.",
            "This chunk sitsuate within the document to give the Q2 2023 revenue.",
        ] {
            assert!(reasons(ok).is_empty(), "{ok:?} → {:?}", reasons(ok));
        }
        let long = "word ".repeat(MAX_WORDS + 1);
        has(&long, "too long");
        let v = verify(
            "This chunk is from the ACME Corp Q2 2023 report on",
            CHUNK,
            DOC,
            true,
        );
        assert!(v.reasons.iter().any(|r| r.contains("token limit")));
    }

    #[test]
    fn a_context_in_another_language_is_rejected() {
        let ru_doc = "Отчёт компании за второй квартал. Выручка выросла на 3% по сравнению с прошлым кварталом и составила 314 миллионов.";
        let ru_chunk =
            "Выручка выросла на 3% по сравнению с прошлым кварталом и составила 314 миллионов.";
        let v = verify(
            "This chunk is from the second quarter report and describes how revenue grew compared with the previous quarter.",
            ru_chunk,
            ru_doc,
            false,
        );
        assert!(
            v.reasons
                .iter()
                .any(|r| r.contains("while the chunk is in Cyrillic script")),
            "{:?}",
            v.reasons
        );
        // Short texts, where the language cannot be told, still differ in script.
        let v = verify(
            "The document covers quarterly revenue.",
            "Выручка выросла на 3%.",
            ru_doc,
            false,
        );
        assert!(
            v.reasons.iter().any(|r| r.contains("Latin script")),
            "{:?}",
            v.reasons
        );
        // Same script, other language, long enough to tell.
        let v = verify(
            "Dieser Abschnitt stammt aus dem Bericht über das zweite Quartal und beschreibt das Wachstum.",
            "Revenue grew by 3% over the previous quarter, to $314 million, and the growth came from the cloud storage unit.",
            DOC,
            false,
        );
        assert!(
            v.reasons
                .iter()
                .any(|r| r.contains("while the chunk is in English")),
            "{:?}",
            v.reasons
        );
        let v = verify(
            "Фрагмент из отчёта компании за второй квартал, о росте выручки по сравнению с прошлым кварталом.",
            ru_chunk,
            ru_doc,
            false,
        );
        assert!(v.passed(), "{:?}", v.reasons);
    }

    #[test]
    fn a_context_in_the_documents_language_passes_whatever_the_chunks() {
        // An English report quoting a French sentence: a note in English situates it.
        let quote = "Le chiffre d'affaires a augmenté de trois pour cent par rapport au trimestre précédent, grâce au stockage en nuage.";
        let doc = format!(
            "{DOC}\n\nOperating costs fell by 2% to $250 million after the closure of the Denver \
             anvil plant, and headcount was 1,850 at the end of the quarter. The board expects \
             the cloud storage unit to keep growing through the rest of the year. Most of the \
             new customers are hospitals and schools, which signed contracts of three years or \
             more, and the company will open a second data centre in Ohio next spring. The \
             anvil business was flat: sales to farms and workshops made up for the loss of one \
             large retail customer.\n\n\
             Press: a Paris newspaper wrote about the quarter: {quote}"
        );
        assert_eq!(
            whatlang::detect(quote).map(|i| i.lang()),
            Some(whatlang::Lang::Fra)
        );
        assert_eq!(
            whatlang::detect(&doc).map(|i| i.lang()),
            Some(whatlang::Lang::Eng)
        );
        let v = verify(
            "This chunk quotes a Paris newspaper on the quarter's revenue growth, in ACME Corp's quarterly report for the second quarter of 2023, within the press section.",
            quote,
            &doc,
            false,
        );
        assert!(v.passed(), "{:?}", v.reasons);
        // A note in neither the chunk's nor the document's language is still rejected.
        let v = verify(
            "Ein Zitat einer Pariser Zeitung im Quartalsbericht über das Wachstum des Umsatzes im Quartal.",
            quote,
            &doc,
            false,
        );
        assert!(
            v.reasons
                .iter()
                .any(|r| r.contains("in German while the chunk is in French")),
            "{:?}",
            v.reasons
        );
        // The same for scripts: Latin code in a Russian document, a note in Russian.
        let code = "fn revenue(q: u32) -> u64 { 314 }";
        let ru_doc = format!("Отчёт компании за второй квартал с примером кода: {code}");
        let v = verify(
            "Пример кода из отчёта компании о выручке за второй квартал.",
            code,
            &ru_doc,
            false,
        );
        assert!(
            !v.reasons.iter().any(|r| r.contains("script")),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn stored_contexts_are_rechecked_and_keep_what_only_generation_knew() {
        use situate_core::{ChunkContext, ContextMethod, ContextStatus, Provenance};
        let prov = |method: &str| {
            Some(Provenance {
                method: method.parse::<ContextMethod>().expect("a method"),
                model: Some("local:test".into()),
                prompt_version: Some("anthropic-v1".into()),
                input_hash: "h".into(),
                strategy: None,
                parts: vec![],
            })
        };
        let stored = |text: &str, status, method: &str, notes: &[&str]| ChunkContext {
            text: Some(text.into()),
            status,
            provenance: prov(method),
            notes: notes.iter().map(|n| n.to_string()).collect(),
        };
        let echo = "The context helps to situate this chunk for search retrieval.";
        let now = recheck(
            stored(echo, ContextStatus::Verified, "llm", &[]),
            CHUNK,
            DOC,
        );
        assert_eq!(now.status, ContextStatus::Rejected);
        assert!(
            now.notes.iter().any(|n| n.contains("chatter")),
            "{:?}",
            now.notes
        );
        let good = "From the ACME Corp report for Q2 2023, on revenue.";
        let now = recheck(
            stored(good, ContextStatus::Rejected, "llm", &["an older check"]),
            CHUNK,
            DOC,
        );
        assert_eq!(now.status, ContextStatus::Verified, "{:?}", now.notes);
        let now = recheck(
            stored(
                good,
                ContextStatus::Rejected,
                "llm",
                &["repeats itself (stopped)"],
            ),
            CHUNK,
            DOC,
        );
        assert_eq!(now.status, ContextStatus::Rejected);
        assert_eq!(now.notes, ["repeats itself (stopped)"]);
        let manual = stored(
            echo,
            ContextStatus::Verified,
            "manual",
            &["accepted by hand"],
        );
        assert_eq!(
            recheck(manual.clone(), CHUNK, DOC),
            manual,
            "a person's decision stands"
        );
    }
}
