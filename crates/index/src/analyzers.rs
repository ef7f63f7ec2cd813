//! Per-language analyzers. Documents and queries go through the same analyzer, chosen by
//! the document's language (queries: by the field they are matched against).

use situate_core::Language;
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language as StemLang, LowerCaser, RemoveLongFilter, SimpleTokenizer,
    Stemmer, StopWordFilter, TextAnalyzer, Token, TokenStream, Tokenizer,
};

/// How Chinese text is cut into terms. Fixed when an index is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChineseTokenizer {
    /// Every CJK character and every pair of neighbouring CJK characters (no dictionary,
    /// robust to names and new words).
    #[default]
    Bigram,
    /// jieba word segmentation in search mode (a built-in dictionary).
    Jieba,
}

impl ChineseTokenizer {
    /// The stored and CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChineseTokenizer::Bigram => "bigram",
            ChineseTokenizer::Jieba => "jieba",
        }
    }
}

impl std::str::FromStr for ChineseTokenizer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bigram" => Ok(ChineseTokenizer::Bigram),
            "jieba" => Ok(ChineseTokenizer::Jieba),
            _ => Err(format!(
                "unknown Chinese tokenizer {s:?}: expected bigram or jieba"
            )),
        }
    }
}

/// The tantivy tokenizer name registered for a language.
pub fn tokenizer_name(lang: Language) -> &'static str {
    match lang {
        Language::En => "situate_en",
        Language::Ru => "situate_ru",
        Language::Zh => "situate_zh",
        Language::Other => "situate_other",
    }
}

/// Terms longer than this many bytes are dropped (base64 blobs, minified code).
const MAX_TERM_BYTES: usize = 64;

/// Builds the analyzer for a language.
pub fn analyzer(lang: Language, chinese: ChineseTokenizer) -> TextAnalyzer {
    match lang {
        Language::En => stemmed(StemLang::English),
        Language::Ru => stemmed(StemLang::Russian),
        Language::Zh => match chinese {
            ChineseTokenizer::Bigram => TextAnalyzer::builder(CjkBigrams)
                .filter(RemoveLongFilter::limit(MAX_TERM_BYTES))
                .filter(LowerCaser)
                .build(),
            ChineseTokenizer::Jieba => TextAnalyzer::builder(WordsOnly(
                tantivy_jieba::JiebaTokenizer::with_search_mode(true),
            ))
            .filter(RemoveLongFilter::limit(MAX_TERM_BYTES))
            .filter(LowerCaser)
            .build(),
        },
        Language::Other => TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(MAX_TERM_BYTES))
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .build(),
    }
}

fn stemmed(lang: StemLang) -> TextAnalyzer {
    let builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TERM_BYTES))
        .filter(LowerCaser)
        .dynamic();
    // tantivy ships stop word lists for both languages used here; without one the analyzer
    // still works, only less precisely.
    let builder = match StopWordFilter::new(lang) {
        Some(f) => builder.filter_dynamic(f),
        None => builder,
    };
    builder.filter_dynamic(Stemmer::new(lang)).build()
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

/// CJK characters as unigrams and bigrams; other letters and digits as words. Written by
/// hand: tantivy's n-gram tokenizer would also cut Latin words into n-grams, and CJK-aware
/// bigram tokenizers on crates.io target other tantivy versions.
#[derive(Clone, Copy, Debug, Default)]
pub struct CjkBigrams;

/// The token stream of [`CjkBigrams`]: all tokens are computed up front (queries and chunks
/// are short).
pub struct VecTokenStream {
    tokens: Vec<Token>,
    at: usize,
}

impl TokenStream for VecTokenStream {
    fn advance(&mut self) -> bool {
        self.at += 1;
        self.at <= self.tokens.len()
    }
    fn token(&self) -> &Token {
        &self.tokens[self.at - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.at - 1]
    }
}

fn push(tokens: &mut Vec<Token>, text: &str, from: usize, to: usize) {
    let position = tokens.len();
    tokens.push(Token {
        offset_from: from,
        offset_to: to,
        position,
        text: text[from..to].to_string(),
        position_length: 1,
    });
}

impl Tokenizer for CjkBigrams {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        let mut tokens = Vec::new();
        let mut word_start: Option<usize> = None;
        let mut prev_cjk: Option<usize> = None;
        for (i, c) in text.char_indices() {
            let end = i + c.len_utf8();
            if is_cjk(c) {
                if let Some(ws) = word_start.take() {
                    push(&mut tokens, text, ws, i);
                }
                push(&mut tokens, text, i, end);
                if let Some(p) = prev_cjk {
                    push(&mut tokens, text, p, end);
                }
                prev_cjk = Some(i);
            } else {
                prev_cjk = None;
                if c.is_alphanumeric() {
                    word_start.get_or_insert(i);
                } else if let Some(ws) = word_start.take() {
                    push(&mut tokens, text, ws, i);
                }
            }
        }
        if let Some(ws) = word_start {
            push(&mut tokens, text, ws, text.len());
        }
        VecTokenStream { tokens, at: 0 }
    }
}

/// Drops the punctuation and white-space tokens a segmenter (jieba) emits.
#[derive(Clone)]
pub struct WordsOnly<T>(T);

impl<T: Tokenizer> Tokenizer for WordsOnly<T> {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        let mut tokens = Vec::new();
        let mut inner = self.0.token_stream(text);
        while inner.advance() {
            let t = inner.token();
            if t.text.chars().any(char::is_alphanumeric) {
                let mut t = t.clone();
                t.position = tokens.len();
                tokens.push(t);
            }
        }
        VecTokenStream { tokens, at: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(lang: Language, chinese: ChineseTokenizer, text: &str) -> Vec<String> {
        let mut a = analyzer(lang, chinese);
        let mut s = a.token_stream(text);
        let mut out = vec![];
        s.process(&mut |t: &Token| out.push(t.text.clone()));
        out
    }

    #[test]
    fn english_stems_and_drops_stop_words() {
        assert_eq!(
            terms(Language::En, Default::default(), "The Runners are running"),
            vec!["runner", "run"]
        );
    }

    #[test]
    fn russian_is_stemmed() {
        let t = terms(Language::Ru, Default::default(), "Красивые книги и книга");
        assert_eq!(
            t.iter().filter(|x| x.as_str() == "книг").count(),
            2,
            "{t:?}"
        );
        assert!(!t.contains(&"и".to_string()), "{t:?}");
    }

    #[test]
    fn chinese_bigrams_and_latin_words() {
        assert_eq!(
            terms(
                Language::Zh,
                ChineseTokenizer::Bigram,
                "北京大学 in Beijing"
            ),
            vec![
                "北", "京", "北京", "大", "京大", "学", "大学", "in", "beijing"
            ]
        );
    }

    #[test]
    fn chinese_jieba_segments_words_without_punctuation() {
        let t = terms(
            Language::Zh,
            ChineseTokenizer::Jieba,
            "我来到北京清华大学。",
        );
        assert!(
            t.contains(&"北京".to_string()) && t.contains(&"清华".to_string()),
            "{t:?}"
        );
        assert!(!t.iter().any(|x| x == "。"), "{t:?}");
    }

    #[test]
    fn other_languages_fold_accents() {
        assert_eq!(
            terms(Language::Other, Default::default(), "Café Über"),
            vec!["cafe", "uber"]
        );
    }
}
