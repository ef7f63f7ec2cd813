//! Language detection, which decides each document's BM25 analyzer.

use situate_core::Language;

/// How many bytes of a document the detector reads (enough for a reliable guess, and cheap
/// on a 50 MB file).
const SAMPLE_BYTES: usize = 4096;

/// Detects the language of `text`, falling back to `fallback` when the detector is unsure.
///
/// Unsure guesses are decided by script: Cyrillic text is Russian, Han text Chinese, and
/// anything else takes `fallback` (English by default), since short English snippets are
/// where detectors most often guess wrong.
pub fn detect(text: &str, fallback: Language) -> Language {
    let mut end = text.len().min(SAMPLE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let sample = &text[..end];
    let Some(info) = whatlang::detect(sample) else {
        return fallback;
    };
    // English, Russian and Chinese are taken even when the detector is unsure (short
    // texts); another language only when it is sure, and then it gets the neutral analyzer.
    match info.lang() {
        whatlang::Lang::Eng => return Language::En,
        whatlang::Lang::Rus => return Language::Ru,
        whatlang::Lang::Cmn => return Language::Zh,
        _ => {}
    }
    match info.script() {
        whatlang::Script::Cyrillic if !info.is_reliable() => Language::Ru,
        whatlang::Script::Mandarin => Language::Zh,
        _ if info.is_reliable() => Language::Other,
        _ => fallback,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_the_three_analyzed_languages() {
        assert_eq!(
            detect(
                "Tidal turbines convert the motion of the sea into electricity.",
                Language::Other
            ),
            Language::En
        );
        assert_eq!(
            detect(
                "Москва является столицей Российской Федерации и крупнейшим городом страны.",
                Language::En
            ),
            Language::Ru
        );
        assert_eq!(
            detect(
                "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
                Language::En
            ),
            Language::Zh
        );
    }

    #[test]
    fn unsure_latin_text_falls_back_and_sure_other_languages_are_other() {
        assert_eq!(detect("hello world", Language::En), Language::En);
        assert_eq!(detect("", Language::Ru), Language::Ru);
        assert_eq!(
            detect(
                "Der schnelle braune Fuchs springt über den faulen Hund und läuft weiter in den Wald.",
                Language::En
            ),
            Language::Other
        );
    }

    #[test]
    fn does_not_split_a_character_at_the_sample_edge() {
        // "я" is two bytes: after one ASCII byte, SAMPLE_BYTES falls inside a character.
        let text = format!("a{}", "я".repeat(SAMPLE_BYTES));
        assert!(!text.is_char_boundary(SAMPLE_BYTES));
        assert_eq!(detect(&text, Language::En), Language::Ru);
    }
}
