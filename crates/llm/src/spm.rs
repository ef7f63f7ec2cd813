//! SentencePiece tokenizers stored in GGUF files (`tokenizer.ggml.model = "llama"`: Gemma,
//! Llama 2, Mistral), rebuilt as a `tokenizers` BPE model.
//!
//! candle reads only byte-level BPE (`gpt2`) tokenizers from GGUF. A SentencePiece BPE
//! vocabulary has pieces and scores instead of merges; the merges are derived the way
//! Hugging Face's converter does it: every split of a piece into two pieces of the
//! vocabulary is a merge, ranked by the score of the piece it makes (higher first). Spaces
//! are `▁`, unknown bytes fall back to `<0xNN>` pieces.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper, Tokenizer};

/// The GGUF token types that are not ordinary text.
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// A SentencePiece vocabulary as GGUF stores it.
pub struct SpmVocab<'a> {
    /// The pieces, by id.
    pub tokens: &'a [String],
    /// Their scores (higher merges first).
    pub scores: &'a [f32],
    /// Their GGUF types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    pub types: &'a [i32],
    /// The unknown piece's id.
    pub unk: Option<u32>,
    /// Whether a `▁` is put before the text (`tokenizer.ggml.add_space_prefix`).
    pub add_space_prefix: bool,
}

/// Builds the tokenizer.
pub fn build(v: &SpmVocab<'_>) -> Result<Tokenizer, String> {
    if v.tokens.len() != v.scores.len() {
        return Err(format!(
            "{} tokens but {} scores",
            v.tokens.len(),
            v.scores.len()
        ));
    }
    let vocab: Vocab = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let mut merges: Vec<(f32, u32, String, String)> = Vec::new();
    for (id, piece) in v.tokens.iter().enumerate() {
        let ty = v.types.get(id).copied().unwrap_or(1);
        if ty == CONTROL || ty == 6 || piece.chars().count() < 2 {
            continue;
        }
        for (i, _) in piece.char_indices().skip(1) {
            let (a, b) = piece.split_at(i);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                merges.push((v.scores[id], id as u32, a.to_string(), b.to_string()));
            }
        }
    }
    // Higher score first; ties by id, as SentencePiece's own order.
    merges.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let merges: Vec<(String, String)> = merges.into_iter().map(|(_, _, a, b)| (a, b)).collect();
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = v.unk.and_then(|u| v.tokens.get(u as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder.build().map_err(|e| e.to_string())?;
    let mut tokenizer = Tokenizer::new(bpe);
    let mut norms: Vec<NormalizerWrapper> = Vec::new();
    if v.add_space_prefix {
        norms.push(Prepend::new("▁".into()).into());
    }
    norms.push(Replace::new(" ", "▁").map_err(|e| e.to_string())?.into());
    tokenizer
        .with_normalizer(Some(NormalizerSequence::new(norms)))
        .map_err(|e| e.to_string())?;
    let mut decoders: Vec<DecoderWrapper> = vec![DecoderWrapper::Replace(
        Replace::new("▁", " ").map_err(|e| e.to_string())?,
    )];
    decoders.push(ByteFallback::new().into());
    decoders.push(Fuse::new().into());
    if v.add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    let specials: Vec<AddedToken> = v
        .tokens
        .iter()
        .zip(v.types)
        .filter(|(_, t)| **t == CONTROL || **t == USER_DEFINED)
        .map(|(p, _)| AddedToken::from(p.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(specials)
        .map_err(|e| e.to_string())?;
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
        let mut tokens: Vec<String> = [
            "<unk>",
            "<bos>",
            "<start_of_turn>",
            "▁",
            "h",
            "e",
            "l",
            "o",
            "w",
            "r",
            "d",
            "▁h",
            "ll",
            "▁he",
            "llo",
            "▁hello",
            "▁w",
            "or",
            "▁wor",
            "ld",
            "▁world",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut types = vec![2, CONTROL, USER_DEFINED];
        types.extend(std::iter::repeat_n(1, tokens.len() - 3));
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        // Longer pieces score higher, as in trained vocabularies.
        let scores = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i < 3 {
                    0.0
                } else {
                    t.chars().count() as f32 - i as f32 * 1e-3
                }
            })
            .collect();
        (tokens, scores, types)
    }

    #[test]
    fn pieces_merge_by_score_and_unknown_bytes_fall_back() {
        let (tokens, scores, types) = vocab();
        let t = build(&SpmVocab {
            tokens: &tokens,
            scores: &scores,
            types: &types,
            unk: Some(0),
            add_space_prefix: true,
        })
        .expect("builds");
        let enc = t.encode("hello world", false).expect("encode");
        assert_eq!(enc.get_tokens(), ["▁hello", "▁world"]);
        // "é" is not a piece: its two UTF-8 bytes.
        let enc = t.encode("hé", false).expect("encode");
        assert_eq!(enc.get_tokens(), ["▁h", "<0xC3>", "<0xA9>"]);
        assert_eq!(t.decode(enc.get_ids(), false).expect("decode"), "hé");
        // Control and user-defined pieces are single tokens.
        let enc = t.encode("<start_of_turn>hello", false).expect("encode");
        assert_eq!(enc.get_ids()[0], 2);
        let round = t
            .decode(t.encode("hello world", false).expect("e").get_ids(), false)
            .expect("d");
        assert_eq!(round, "hello world");
    }
}
