//! The fusion an index searches with when nobody says otherwise, per embedder family.
//!
//! Chosen by leave-one-set-out over the four shared sets (EVALUATION.md, "Fusion"): for
//! each family the fusion and α that score best on three sets, reported on the fourth, and
//! then the choice made on all four. An index records its family's choice when its
//! embedder is fixed (its first ingest: [`crate::Engine::index_fusion`]), so a later change
//! of this table does not move an existing index's ranking; a setting of the user's
//! (`situate.toml`, a flag, a request) overrides the record ([`crate::SearchPlan::with_fusion`]).
//! An index whose embedder was fixed before indexes recorded a fusion keeps the fusion it
//! was built for, [`before_records`].

use crate::settings::SearchSettings;

/// The family of an embedder spec: the catalog name before any `:` option
/// (`embeddinggemma-300m:q8` → `embeddinggemma-300m`); a directory or hosted model is its
/// own family, with no table entry.
pub fn family(spec: &str) -> &str {
    spec.split(':').next().unwrap_or(spec)
}

/// One row of the table: a family, its fusion, RRF's k (for `rrf`) and α (the vector
/// leg's share).
struct Row {
    family: &'static str,
    fusion: &'static str,
    rrf_k: Option<f32>,
    alpha: f32,
}

/// The leave-one-set-out choices (EVALUATION.md, "Fusion"; `bench/fusion.sh`, then
/// `bench/fusion_table.py`, whose last lines are these rows); a family not listed (not
/// measured yet, a model directory, a hosted model) searches with RRF, k = 60, both
/// weights 1.
const TABLE: &[Row] = &[
    Row {
        family: "all-minilm-l6-v2",
        fusion: "tm2c2",
        rrf_k: None,
        alpha: 0.75,
    },
    Row {
        family: "multilingual-e5-small",
        fusion: "minmax",
        rrf_k: None,
        alpha: 0.5,
    },
    Row {
        family: "embeddinggemma-300m",
        fusion: "tm2c2",
        rrf_k: None,
        alpha: 0.9,
    },
    // nomic and MPNet: four sets (on Russian the language rule of `for_corpus` applies).
    Row {
        family: "nomic-embed-text-v1.5",
        fusion: "tm2c2",
        rrf_k: None,
        alpha: 0.9,
    },
    Row {
        family: "all-mpnet-base-v2",
        fusion: "tm2c2",
        rrf_k: None,
        alpha: 0.75,
    },
];

/// The fusion settings an index whose embedder is `spec` records.
pub fn for_embedder(spec: &str) -> SearchSettings {
    let family = family(spec);
    match TABLE.iter().find(|r| r.family == family) {
        Some(r) => SearchSettings {
            fusion: Some(r.fusion.into()),
            rrf_k: r.rrf_k,
            alpha: Some(r.alpha),
            ..SearchSettings::default()
        },
        None => before_records(),
    }
}

/// The fusion settings an index whose embedder is `spec` records for a corpus whose
/// documents have these `languages`: [`for_embedder`], except that an embedder that reads
/// English only ([`situate_embed::english_only`]) over a corpus mostly in other languages
/// gets the vector leg's share at 0 (α = 0: the hybrid ranks as BM25 does), since its
/// vectors of such text rank by noise. This is a rule from the models' languages, not a
/// value tuned on a set: with MiniLM on XQuAD-R's Russian sentences the vector leg scores
/// 0.21 nDCG@10 against BM25's 0.82, and any α the other sets choose costs the hybrid
/// (EVALUATION.md, "Fusion").
pub fn for_corpus(spec: &str, languages: &[situate_core::Language]) -> SearchSettings {
    let english = languages
        .iter()
        .filter(|l| **l == situate_core::Language::En)
        .count();
    let mostly_other = !languages.is_empty() && english * 2 < languages.len();
    let mut s = for_embedder(spec);
    if mostly_other && situate_embed::english_only(spec) {
        // `alpha` says both weights: drop the pair `before_records` gives.
        s.bm25_weight = None;
        s.vector_weight = None;
        s.alpha = Some(0.0);
    }
    s
}

/// The fusion every index had before indexes recorded one (RRF, k = 60, both weights 1):
/// what an index made then was built for, so it keeps searching with it (its fused
/// scores, and any `[answer] min_score` set on them, stay as they were); and what a
/// family without a row gets.
pub fn before_records() -> SearchSettings {
    SearchSettings {
        fusion: Some("rrf".into()),
        rrf_k: Some(60.0),
        bm25_weight: Some(1.0),
        vector_weight: Some(1.0),
        ..SearchSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_a_valid_fusion_and_families_ignore_options() {
        for r in TABLE {
            assert!(
                situate_models::CATALOG.iter().any(|e| e.name == r.family),
                "{} is a catalog embedder",
                r.family
            );
            let s = for_embedder(r.family);
            s.plan("m").expect("a valid fusion");
            assert_eq!(for_embedder(&format!("{}:q8", r.family)), s);
        }
        assert_eq!(family("embeddinggemma-300m:256:q8"), "embeddinggemma-300m");
        // An English-only model over a corpus mostly in other languages: α 0.
        use situate_core::Language::{En, Ru};
        for spec in [
            "all-minilm-l6-v2",
            "all-mpnet-base-v2:q8",
            "nomic-embed-text-v1.5",
        ] {
            let s = for_corpus(spec, &[Ru, Ru, En]);
            assert_eq!(s.alpha, Some(0.0), "{spec}");
            let plan = s.plan("m").expect("a valid fusion");
            assert_eq!((plan.bm25_weight, plan.vector_weight), (1.0, 0.0), "{spec}");
            assert_eq!(
                for_corpus(spec, &[Ru, En, En]),
                for_embedder(spec),
                "{spec}"
            );
            assert_eq!(for_corpus(spec, &[]), for_embedder(spec), "{spec}");
        }
        for spec in [
            "multilingual-e5-small",
            "embeddinggemma-300m:q8",
            "/models/mine",
        ] {
            assert_eq!(for_corpus(spec, &[Ru]), for_embedder(spec), "{spec}");
        }
        let unknown = for_embedder("/models/mine");
        let plan = unknown.plan("m").expect("valid");
        assert_eq!(plan.fusion, situate_search::fusion::Fusion::Rrf { k: 60.0 });
        assert_eq!((plan.bm25_weight, plan.vector_weight), (1.0, 1.0));
    }
}
