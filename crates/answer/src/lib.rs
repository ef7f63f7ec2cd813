//! Grounded answers: the step after retrieval.
//!
//! Contextual Retrieval draws three rules for it, and this crate holds them:
//!
//! - **The context is navigation, the original is the source.** Each passage goes to the
//!   model in its own block, its situating context in a `<context>` section and its
//!   original text in an `<original>` section ([`build_prompt`]); the instruction says to
//!   answer only from the originals.
//! - **The answer cites its source.** The model quotes the original's words and names the
//!   passage (`«quoted words» [2]`); [`check`] finds every citation, maps the passage's
//!   number to its chunk, and checks that the number was given and that the quoted words
//!   are in that passage's original: words found only in the context are caught as a
//!   context quoted as if it were the source.
//! - **When the documents do not hold the answer, say so.** The model is told to reply
//!   with a fixed phrase ([`NOT_IN_DOCUMENTS`], in the question's language); [`check`] also
//!   recognises the usual ways of saying it, and the answer shown is then
//!   [`not_in_documents`] in the question's language.
//!
//! The crate does no retrieval and calls no model: the engine gives it the passages and
//! the model's reply. Written by hand because no crate does this: it is situate's own
//! prompt and reply format.
#![warn(missing_docs)]

use regex::Regex;
use situate_core::Language;
use std::sync::OnceLock;

/// What the model is told to reply, exactly, when the originals do not hold the answer, by
/// the question's language (English for every language but Russian).
pub const NOT_IN_DOCUMENTS: [(Language, &str); 2] = [
    (Language::Ru, "В ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО"),
    (Language::En, "THE DOCUMENTS DO NOT SAY"),
];

/// The version of the answer prompt, recorded with every answer.
pub const PROMPT_VERSION: &str = "answer-v1";

/// One retrieved chunk given to the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Passage {
    /// The number the model cites it by (`[1]`, `[2]`, … in the order given).
    pub id: usize,
    /// The chunk.
    pub chunk_id: String,
    /// Its document.
    pub document_id: String,
    /// The document's title, if any.
    pub title: Option<String>,
    /// Its situating context (navigation, never a source).
    pub context: Option<String>,
    /// Its original text (the source).
    pub original: String,
    /// The pages or slides it covers, in a paged document (so an answer can cite
    /// "report.pdf p. 12").
    pub place: Option<situate_core::Place>,
    /// The retrieval score it was found with (the hit's final score).
    pub score: f32,
}

/// The prompt for one question: `prefix` (the passages, which a provider may cache), then
/// `suffix` (the question and the instruction).
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerPrompt {
    /// The passages, each in its own block.
    pub prefix: String,
    /// The question and the instruction, in the question's language.
    pub suffix: String,
}

/// The sentence a reply is told to use when the documents do not hold the answer.
pub fn not_in_documents_phrase(language: Language) -> &'static str {
    NOT_IN_DOCUMENTS
        .iter()
        .find(|(l, _)| *l == language)
        .map_or(NOT_IN_DOCUMENTS[1].1, |(_, p)| p)
}

/// What the user is told when the documents do not hold the answer, in the question's
/// language.
pub fn not_in_documents(language: Language) -> &'static str {
    match language {
        Language::Ru => "В документах нет ответа на этот вопрос.",
        Language::Zh => "文档中没有这个问题的答案。",
        Language::En | Language::Other => "The documents do not contain the answer.",
    }
}

/// What the user is told when an answer was withheld because its citations did not hold
/// (`unsupported = "refuse"`), in the question's language.
pub fn refused(language: Language) -> &'static str {
    match language {
        Language::Ru => "Ответ не дан: его цитаты не подтвердились текстом документов.",
        Language::Zh => "未给出答案：其引用无法在文档原文中得到证实。",
        Language::En | Language::Other => {
            "No answer is given: its citations could not be found in the documents' text."
        }
    }
}

/// The question block asked again after a reply whose citations failed: the first
/// instruction, the reply, what was wrong with it, and the rule once more. Greedy decoding
/// would write the same reply to the same prompt, so the second prompt must differ.
pub fn retry_block(
    question_block: &str,
    reply: &str,
    problems: &[String],
    language: Language,
) -> String {
    let problems = problems.join("; ");
    let phrase = not_in_documents_phrase(language);
    match language {
        Language::Ru => format!(
            "{question_block}\n<previous_answer>\n{}\n</previous_answer>\nЭтот ответ не подтверждён: {problems}. Ответь заново: приведи в «…» точные слова из <original> и номер фрагмента в [ ]. Если ответа в <original> нет, ответь только: {phrase}",
            section(reply)
        ),
        _ => format!(
            "{question_block}\n<previous_answer>\n{}\n</previous_answer>\nThat answer is not supported: {problems}. Answer again: quote the exact words of an <original> in quotation marks and give its passage id in [ ]. If no <original> contains the answer, reply only: {phrase}",
            section(reply)
        ),
    }
}

/// The passages as the prompt's prefix: one `<passage>` block each, its context and its
/// original in sections of their own. Shared by every question over the same passages
/// (full-context mode caches it).
pub fn passages_block(passages: &[Passage]) -> String {
    let mut out = String::from("<passages>\n");
    for p in passages {
        // The number alone: a chunk id beside it ("aster.md#2" on passage 3) made
        // Qwen2.5-Coder-1.5B cite the chunk's ordinal instead of the passage's number.
        out.push_str(&format!("<passage id=\"{}\">\n", p.id));
        if let Some(title) = p.title.as_deref().filter(|t| !t.trim().is_empty()) {
            out.push_str(&format!("<title>{}</title>\n", section(title)));
        }
        if let Some(place) = p.place {
            out.push_str(&format!("<where>{place}</where>\n"));
        }
        if let Some(context) = p.context.as_deref().filter(|c| !c.trim().is_empty()) {
            out.push_str(&format!("<context>\n{}\n</context>\n", section(context)));
        }
        out.push_str(&format!(
            "<original>\n{}\n</original>\n</passage>\n",
            section(&p.original)
        ));
    }
    out.push_str("</passages>\n");
    out
}

/// The question and the instruction, in the question's language (Russian questions are
/// asked in Russian: a small model answers in the language it is asked in).
pub fn question_block(question: &str, language: Language) -> String {
    let phrase = not_in_documents_phrase(language);
    let instruction = match language {
        Language::Ru => format!(
            "Найди в разделах <original> слова, которые относятся к вопросу, и приведи их дословно в кавычках «…», а сразу после них номер фрагмента (id) в квадратных скобках. Затем ответь на вопрос одним предложением по-русски. Ответ может быть выводом, который прямо следует из цитаты, но не добавляй ничего, чего в ней нет. Разделы <context> только говорят, откуда фрагмент: не бери из них факты. Формат:\nЦитата: «точные слова из <original>» [id]\nОтвет: …\nЕсли в разделах <original> нет того, о чём спрашивает вопрос, ответь только: {phrase}"
        ),
        _ => format!(
            "Find the words in the <original> sections that bear on the question and quote them exactly in quotation marks, followed at once by the passage's id in square brackets. Then answer the question in one sentence, in the question's language. The answer may be a conclusion that follows directly from the quote, but add nothing the quote does not say. The <context> sections only say where a passage comes from: take no facts from them. Format:\nQuote: \"exact words from an <original>\" [id]\nAnswer: …\nIf the <original> sections do not say what the question asks, reply only: {phrase}"
        ),
    };
    format!(
        "<question>\n{}\n</question>\n{instruction}",
        section(question)
    )
}

/// The whole prompt for `question` over `passages`.
pub fn build_prompt(question: &str, passages: &[Passage], language: Language) -> AnswerPrompt {
    AnswerPrompt {
        prefix: passages_block(passages),
        suffix: question_block(question, language),
    }
}

/// A section's text, with a closing tag inside it broken so that it cannot end the section.
fn section(s: &str) -> String {
    s.trim().replace("</", "<\u{2060}/")
}

/// One citation in a reply.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Citation {
    /// What the reply cited (`2`, or a chunk id).
    pub cited: String,
    /// The passage's number, when the citation names one that was given.
    pub passage: Option<usize>,
    /// The chunk cited, when the passage was given.
    pub chunk_id: Option<String>,
    /// Its document.
    pub document_id: Option<String>,
    /// The pages or slides of the passage cited, in a paged document.
    pub place: Option<situate_core::Place>,
    /// The words quoted before the citation, if any.
    pub quote: Option<String>,
    /// Whether the citation holds: the passage was given, and the quote (if any) is in its
    /// original text.
    pub valid: bool,
    /// Why not, when it does not hold.
    pub problem: Option<String>,
}

/// A reply read and checked against the passages it was given.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The answer as shown: the reply as written (its `[n]` citations name the passages
    /// given, whose chunks [`Checked::citations`] lists), or, when the model abstained,
    /// [`not_in_documents`].
    pub text: String,
    /// The model said the documents do not hold the answer.
    pub abstained: bool,
    /// Every citation, in the order written.
    pub citations: Vec<Citation>,
    /// Why the answer is not grounded (empty: every citation holds and there is one).
    pub problems: Vec<String>,
}

impl Checked {
    /// An answer that cites at least one passage, every citation holding (or an
    /// abstention).
    pub fn grounded(&self) -> bool {
        self.problems.is_empty()
    }
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).unwrap_or_else(|e| unreachable!("{pattern}: {e}")))
}

/// Whether `reply` says the documents do not hold the answer: the phrase the model was
/// told to use, in any language, or the usual ways of saying it.
pub fn says_not_in_documents(reply: &str) -> bool {
    static SAYS: OnceLock<Regex> = OnceLock::new();
    let says = re(
        &SAYS,
        r"(?i)нет\s+в\s+документах|в\s+документах\s+(об\s+этом\s+|этого\s+)?не\s+(сказано|говорится|указано)|not\s+in\s+the\s+documents|(documents?|passages?|originals?|texts?|sources?|context)\s+(do(es)?\s+not|don't|doesn't)\s+(contain|say|mention|state|include|specify|give|provide|answer)|(no|not\s+any)\s+(information|answer|mention)\s+(about|on|of|to|in)|в\s+(документах|фрагментах|тексте|оригиналах|разделах)\s+(нет|не\s+(указан|сказан|говорится|приведен|упомина))|(документы|фрагменты|тексты)\s+не\s+содерж|не\s+содерж\w*\s+(ответ|информаци|сведени)|(нет|отсутству\w*)\s+(информаци|сведени|данных)",
    );
    says.is_match(reply)
}

/// Whether the reply says, outside its quotes, that the documents do not hold the answer
/// (the fixed phrase or the usual ways of saying it). A reply may quote a passage near
/// the question and then say so (Qwen2.5-Coder-1.5B: `Цитата: «…» [3]` / `Ответ: В
/// ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО`): that is an abstention, its citations kept.
fn abstains(reply: &str) -> bool {
    says_not_in_documents(&quotes().replace_all(reply, " "))
}

/// A quoted span in any of the usual quotation marks; its words are the one group that
/// matched.
fn quotes() -> &'static Regex {
    static QUOTE: OnceLock<Regex> = OnceLock::new();
    re(&QUOTE, r#"«([^«»]+)»|“([^“”]+)[”“]|„([^„“]+)“|"([^"\n]+)""#)
}

/// Lower case, one space between words, quotation marks and dashes of every kind made
/// alike, no punctuation at either end: how a quote is looked for in an original.
fn normalize(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| match c {
            '«' | '»' | '“' | '”' | '„' | '"' => '"',
            '‘' | '’' | '`' => '\'',
            '–' | '—' | '‑' => '-',
            'ё' => 'е',
            'Ё' => 'Е',
            c => c,
        })
        .collect();
    let lower = mapped.to_lowercase();
    let joined = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    joined
        .trim_matches(|c: char| c.is_ascii_punctuation() || c.is_whitespace() || c == '…')
        .to_string()
}

/// Reads `reply`'s citations and checks each against `passages`; see the crate's
/// documentation. `language` is the question's (for the abstention's wording).
pub fn check(reply: &str, passages: &[Passage], language: Language) -> Checked {
    static MARK: OnceLock<Regex> = OnceLock::new();
    // `[2]`, `[2, 3]`, `[aster.md#1]`; not a Markdown link's text (`[text](url)`).
    let mark = re(&MARK, r"\[([^\[\]\n]{1,200})\](\()?");
    let quote = quotes();
    let reply = reply.trim();
    let mut citations = Vec::new();
    let mut last = 0;
    for m in mark.captures_iter(reply) {
        let (Some(whole), Some(inner)) = (m.get(0), m.get(1)) else {
            continue;
        };
        if m.get(2).is_some() {
            continue;
        }
        let names: Vec<&str> = inner
            .as_str()
            .split([',', ';'])
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        let resolved: Vec<Option<&Passage>> = names.iter().map(|n| find(n, passages)).collect();
        // Brackets that name nothing given and are not a number are the reply's own text
        // ("[sic]", "[1/2]"), unless they look like an id.
        if resolved.iter().all(Option::is_none) && !names.iter().all(|n| looks_like_id(n)) {
            continue;
        }
        // The quote this citation closes: the last one between the previous citation and
        // this one.
        let before = &reply[last..whole.start()];
        let quoted = quote
            .captures_iter(before)
            .last()
            .and_then(|q| (1..=4).find_map(|i| q.get(i)))
            .map(|q| q.as_str().trim().to_string())
            .filter(|q| !q.is_empty());
        for (name, passage) in names.iter().zip(&resolved) {
            let citation = match passage {
                None => Citation {
                    cited: name.to_string(),
                    passage: None,
                    chunk_id: None,
                    document_id: None,
                    place: None,
                    quote: quoted.clone(),
                    valid: false,
                    problem: Some(format!(
                        "cites [{name}], which is not one of the passages given"
                    )),
                },
                Some(p) => {
                    let problem = quoted.as_deref().and_then(|q| quote_problem(q, p));
                    Citation {
                        cited: name.to_string(),
                        passage: Some(p.id),
                        chunk_id: Some(p.chunk_id.clone()),
                        document_id: Some(p.document_id.clone()),
                        place: p.place,
                        quote: quoted.clone(),
                        valid: problem.is_none(),
                        problem,
                    }
                }
            };
            citations.push(citation);
        }
        last = whole.end();
    }
    if abstains(reply) {
        return Checked {
            text: not_in_documents(language).to_string(),
            abstained: true,
            citations,
            problems: Vec::new(),
        };
    }
    let mut problems: Vec<String> = citations.iter().filter_map(|c| c.problem.clone()).collect();
    if citations.is_empty() {
        problems.push("cites no passage".into());
    } else if citations.iter().all(|c| c.quote.is_none()) {
        problems.push("quotes nothing from the passages it cites".into());
    }
    if reply.is_empty() {
        problems = vec!["the reply is empty".into()];
    }
    Checked {
        text: reply.to_string(),
        abstained: false,
        citations,
        problems,
    }
}

/// The answer's own sentence in a reply of the prompt's format: what follows `Answer:` /
/// `Ответ:` (or, without that label, the reply without its `Quote:` lines), with its
/// citations and quoted spans taken out. What an answer evaluation scores against gold
/// answers: the quote is the source's words, not the model's answer. A reply that is only
/// a quote (small models often stop there) answers with the quoted words: they are scored.
pub fn answer_part(reply: &str) -> String {
    let own = own_sentence(reply);
    if !own.is_empty() {
        return own;
    }
    let quoted: Vec<&str> = quotes()
        .captures_iter(reply)
        .filter_map(|c| c.iter().skip(1).flatten().next().map(|m| m.as_str().trim()))
        .collect();
    tidy(
        &quoted
            .join(" ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn own_sentence(reply: &str) -> String {
    static LABEL: OnceLock<Regex> = OnceLock::new();
    static QUOTE_LINE: OnceLock<Regex> = OnceLock::new();
    static CITE: OnceLock<Regex> = OnceLock::new();
    let label = re(&LABEL, r"(?im)^\s*\**\s*(?:answer|ответ)\s*\**\s*:\s*\**");
    let quote_line = re(&QUOTE_LINE, r"(?im)^\s*\**\s*(?:quote|цитата)\s*\**\s*:.*$");
    let cite = re(&CITE, r"\[[^\[\]\n]{1,200}\]");
    let body = match label.find_iter(reply).last() {
        Some(m) => &reply[m.end()..],
        None => reply,
    };
    let body = quote_line.replace_all(body, " ");
    let body = cite.replace_all(&body, " ");
    let body = quotes().replace_all(&body, " ");
    tidy(&body.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// What taking quotes and citations out of a sentence leaves behind: a space before a
/// punctuation mark, a colon or dash left before the full stop, a dash the line begins with.
fn tidy(text: &str) -> String {
    static SPACE: OnceLock<Regex> = OnceLock::new();
    static DANGLING: OnceLock<Regex> = OnceLock::new();
    static LEADING: OnceLock<Regex> = OnceLock::new();
    let text = re(&SPACE, r"\s+([.,;:!?…])").replace_all(text, "$1");
    let text = re(&DANGLING, r"[:;,—–-]+\s*([.!?…])").replace_all(&text, "$1");
    let text = re(&LEADING, r"^[:;,—–-]+\s*").replace(&text, "");
    text.trim().to_string()
}

/// The passage `name` cites: its number, `passage 2`/`id=2` forms, or its chunk id.
fn find<'a>(name: &str, passages: &'a [Passage]) -> Option<&'a Passage> {
    static NUMBER: OnceLock<Regex> = OnceLock::new();
    let number = re(
        &NUMBER,
        r"(?i)^(?:passage|фрагмент|id|#)?\s*(?:id\s*)?[=:#№]?\s*(\d+)$",
    );
    if let Some(n) = number
        .captures(name)
        .and_then(|c| c.get(1))
        .and_then(|n| n.as_str().parse::<usize>().ok())
    {
        return passages.iter().find(|p| p.id == n);
    }
    passages.iter().find(|p| p.chunk_id == name)
}

/// A bracket's text that is meant as a citation even though it names nothing given: a
/// number, or a word with the marks chunk ids have (`#`, `/`, `.` inside).
fn looks_like_id(name: &str) -> bool {
    name.chars().all(|c| c.is_ascii_digit())
        || (!name.contains(' ') && name.contains(['#', '/']) && name.len() > 2)
}

/// Why `quote` does not support passage `p`: not in its original (and, worse, in its
/// context). `None` when it is in the original.
fn quote_problem(quote: &str, p: &Passage) -> Option<String> {
    let q = normalize(quote);
    if q.is_empty() || normalize(&p.original).contains(&q) {
        return None;
    }
    let in_context = p
        .context
        .as_deref()
        .is_some_and(|c| normalize(c).contains(&q));
    Some(if in_context {
        format!(
            "quotes the context of [{}] as if it were the source: \"{quote}\" is in its context, not its original",
            p.id
        )
    } else {
        format!("\"{quote}\" is not in the original of [{}]", p.id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_part_leaves_out_quote_and_citations() {
        let ru = "Цитата: «Выгрузка содержит только активные задачи» [3]\nОтвет: Нет, архивные задачи не попадут [3].";
        assert_eq!(answer_part(ru), "Нет, архивные задачи не попадут.");
        let en = "Quote: \"only active tasks\" [1]\n**Answer:** No.";
        assert_eq!(answer_part(en), "No.");
        // Without the labels: the reply, its quotes and citations taken out.
        assert_eq!(answer_part("«308 очков» [2] — 308."), "308.");
        // A reply that is only a quote is answered by the quoted words.
        assert_eq!(
            answer_part("Quote: \"The defense gave up 308 points.\" [1]"),
            "The defense gave up 308 points."
        );
        // What a removed quote leaves before the full stop goes with it.
        assert_eq!(answer_part("Нет: «только активные» [1]."), "Нет.");
    }

    const ASTER: [&str; 3] = [
        "Сервис Aster. Регламент экспорта.",
        "Для тарифа Команда доступен экспорт CSV. Для тарифа Личный экспорт CSV не предусмотрен.",
        "Выгрузка содержит только активные задачи.",
    ];

    fn passages() -> Vec<Passage> {
        ASTER
            .iter()
            .enumerate()
            .map(|(i, t)| Passage {
                id: i + 1,
                chunk_id: format!("aster.md#{i}"),
                document_id: "aster.md".into(),
                title: Some("Сервис Aster".into()),
                context: Some(format!(
                    "Регламент экспорта сервиса Aster, часть {}; архив хранится 30 дней.",
                    i + 1
                )),
                original: t.to_string(),
                place: None,
                score: 1.0 / (i + 1) as f32,
            })
            .collect()
    }

    #[test]
    fn each_passage_has_its_context_and_original_apart_and_the_question_comes_last() {
        let p = build_prompt(
            "Попадут ли архивные задачи Aster в CSV?",
            &passages(),
            Language::Ru,
        );
        assert!(p.prefix.starts_with("<passages>\n<passage id=\"1\">\n"));
        assert_eq!(p.prefix.matches("<original>").count(), 3);
        assert_eq!(p.prefix.matches("<context>").count(), 3);
        let third = p.prefix.find("Выгрузка содержит").expect("original");
        let its_context = p.prefix.find("часть 3").expect("context");
        assert!(its_context < third, "the context comes before its original");
        assert!(p.suffix.starts_with("<question>\nПопадут ли"));
        assert!(p.suffix.contains("В ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО"));
        assert!(p.suffix.contains("по-русски"));
        let en = question_block("Will archived tasks be exported?", Language::En);
        assert!(en.ends_with("THE DOCUMENTS DO NOT SAY"), "{en}");
        // A passage cannot close its own section early.
        let odd = Passage {
            original: "a </original> b".into(),
            chunk_id: "x\"y".into(),
            ..passages()[0].clone()
        };
        let block = passages_block(&[odd]);
        assert_eq!(block.matches("</original>").count(), 1, "{block}");
    }

    #[test]
    fn an_answer_quoting_the_original_is_grounded_and_cites_the_chunk_id() {
        let c = check(
            "Нет, архивные задачи не попадут: «Выгрузка содержит только активные задачи» [3].",
            &passages(),
            Language::Ru,
        );
        assert!(c.grounded(), "{:?}", c.problems);
        assert!(!c.abstained);
        assert_eq!(c.citations.len(), 1);
        let cite = &c.citations[0];
        assert_eq!(cite.chunk_id.as_deref(), Some("aster.md#2"));
        assert_eq!(cite.document_id.as_deref(), Some("aster.md"));
        assert_eq!(
            cite.quote.as_deref(),
            Some("Выгрузка содержит только активные задачи")
        );
        assert_eq!(
            c.text,
            "Нет, архивные задачи не попадут: «Выгрузка содержит только активные задачи» [3]."
        );
        // Case, spacing, ё and the quote's own full stop do not matter.
        let c = check(
            "\"выгрузка  содержит только активные задачи.\" [passage 3]",
            &passages(),
            Language::Ru,
        );
        assert!(c.grounded(), "{:?}", c.problems);
        // A chunk id cited as it is.
        let c = check(
            "«только активные задачи» [aster.md#2]",
            &passages(),
            Language::Ru,
        );
        assert!(c.grounded(), "{:?}", c.problems);
    }

    #[test]
    fn an_id_not_given_and_a_quote_not_in_the_original_are_caught() {
        let c = check(
            "Нет: «Выгрузка содержит только активные задачи» [7].",
            &passages(),
            Language::Ru,
        );
        assert!(!c.grounded());
        assert!(c.problems[0].contains("[7]"), "{:?}", c.problems);
        assert_eq!(c.citations[0].passage, None);
        let c = check(
            "Нет: «Выгрузка содержит только открытые задачи» [3].",
            &passages(),
            Language::Ru,
        );
        assert!(!c.grounded());
        assert!(
            c.problems[0].contains("not in the original of [3]"),
            "{:?}",
            c.problems
        );
        // The context is not the source.
        let c = check(
            "Архив хранится: «архив хранится 30 дней» [3].",
            &passages(),
            Language::Ru,
        );
        assert!(!c.grounded());
        assert!(
            c.problems[0].contains("quotes the context of [3]"),
            "{:?}",
            c.problems
        );
        // No citation at all, or one without a quote.
        for reply in [
            "Архивные задачи не попадут.",
            "Архивные задачи не попадут [3].",
        ] {
            let c = check(reply, &passages(), Language::Ru);
            assert!(!c.grounded(), "{reply}");
        }
        // A Markdown link or a bracketed remark is not a citation.
        let c = check(
            "См. [документацию](https://a.b) [sic]: «только активные задачи» [3]",
            &passages(),
            Language::Ru,
        );
        assert_eq!(c.citations.len(), 1, "{:?}", c.citations);
        assert!(c.grounded(), "{:?}", c.problems);
    }

    #[test]
    fn not_in_the_documents_is_an_abstention_in_the_questions_language() {
        for reply in [
            "НЕТ В ДОКУМЕНТАХ",
            "В ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО",
            "Цитата: «Выгрузка содержит только активные задачи.» [3]\nОтвет: В ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО",
            "Нет в документах.",
            "В документах не указан срок хранения выгрузки.",
            "Фрагменты не содержат информации о сроке хранения.",
            "NOT IN THE DOCUMENTS",
            "The documents do not say how long an export is kept.",
        ] {
            let c = check(reply, &passages(), Language::Ru);
            assert!(c.abstained, "{reply}");
            assert!(c.grounded(), "{reply}");
            assert_eq!(c.text, "В документах нет ответа на этот вопрос.");
        }
        let c = check("THE DOCUMENTS DO NOT SAY", &passages(), Language::En);
        assert_eq!(c.text, "The documents do not contain the answer.");
        // An answer with a valid quote is not an abstention because it says "нет".
        let c = check(
            "Нет, архивных задач в выгрузке нет: «только активные задачи» [3].",
            &passages(),
            Language::Ru,
        );
        assert!(!c.abstained);
        // Words inside a quote do not count: the original may say "нет".
        let mut with_no = passages();
        with_no[2].original = "В документах нет данных о сроке — см. договор.".into();
        let c = check(
            "«В документах нет данных о сроке» [3]: срок задан договором.",
            &with_no,
            Language::Ru,
        );
        assert!(!c.abstained, "{c:?}");
        // A made-up period is not grounded.
        let c = check("Выгрузка хранится 30 дней.", &passages(), Language::Ru);
        assert!(!c.abstained && !c.grounded());
    }

    #[test]
    fn a_second_try_names_what_failed_in_the_questions_language() {
        let q = question_block("Каков срок хранения выгрузки?", Language::Ru);
        let again = retry_block(&q, "30 дней [9]", &["cites [9]".into()], Language::Ru);
        assert!(again.starts_with(&q));
        assert!(again.contains("<previous_answer>\n30 дней [9]\n</previous_answer>"));
        assert!(again.contains("cites [9]") && again.ends_with("В ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО"));
        assert!(refused(Language::Ru).starts_with("Ответ не дан"));
        assert!(retry_block("Q", "A", &[], Language::En).ends_with("THE DOCUMENTS DO NOT SAY"));
    }
}
