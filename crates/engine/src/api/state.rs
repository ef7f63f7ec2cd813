//! The index's state: [`Engine::status`], [`Engine::status_checked`], and what
//! [`Engine::create`] made.

use crate::{Engine, Result};
use serde::Serialize;

/// The answer to creating an index (`situate init`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CreateAnswer {
    /// The index directory.
    pub index: std::path::PathBuf,
    /// Its Chinese tokenizer.
    pub chinese_tokenizer: String,
    /// Its embedder setting (`none`, `auto`, a model).
    pub embedder: String,
}

impl Engine {
    /// What [`Engine::create`] made, as its answer.
    pub fn created(&self) -> Result<CreateAnswer> {
        Ok(CreateAnswer {
            index: self.dir().to_path_buf(),
            chinese_tokenizer: self.chinese_tokenizer().as_str().to_string(),
            embedder: self.embed_settings()?.spec,
        })
    }
}

/// The index's state: `situate stats` (with [`CheckAnswer`]), `GET /v1/info` and MCP's
/// `index_status` (with the service's own fields).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StatusAnswer {
    /// The index directory.
    pub index: std::path::PathBuf,
    /// The mode a search takes when it names none.
    pub default_mode: situate_search::Mode,
    /// Counts over the index.
    pub stats: crate::EngineStats,
    /// The instruction sets this process's kernels use.
    pub cpu: CpuAnswer,
}

/// The vector instructions of this process's kernels ([`situate_core::cpu`]): what every
/// speed figure names.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CpuAnswer {
    /// The level the kernels use (`scalar`, `avx2`, `avxvnni`, `avx512`, `avx512vnni`).
    pub level: String,
    /// Whether `SITUATE_CPU` chose it (else it is the best this CPU runs).
    pub forced: bool,
    /// Every level this CPU runs, from the least.
    pub runs: Vec<String>,
}

impl CpuAnswer {
    /// This process's.
    pub fn here() -> CpuAnswer {
        let level = situate_core::cpu::chosen();
        CpuAnswer {
            level: level.name().to_string(),
            forced: level != situate_core::cpu::detected(),
            runs: situate_core::cpu::levels_here()
                .into_iter()
                .map(|l| l.name().to_string())
                .collect(),
        }
    }
}

/// [`StatusAnswer`] with the comparison of the store's cards and the indexes
/// (`situate stats`).
#[derive(Debug, Clone, Serialize)]
pub struct CheckAnswer {
    /// The index's state.
    #[serde(flatten)]
    pub status: StatusAnswer,
    /// What the comparison found.
    pub consistency: crate::Consistency,
    /// Whether the indexes hold exactly the store's cards.
    pub consistent: bool,
    /// Every file checked (`stats --verify`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrity: Option<crate::IntegrityAnswer>,
}

impl Engine {
    /// The index's state.
    pub fn status(&self) -> Result<StatusAnswer> {
        Ok(StatusAnswer {
            index: self.dir().to_path_buf(),
            default_mode: self.mode_for(None)?,
            stats: self.stats()?,
            cpu: CpuAnswer::here(),
        })
    }

    /// The index's state and the comparison of its cards and indexes ([`Engine::check`]).
    pub fn status_checked(&self) -> Result<CheckAnswer> {
        let consistency = self.check()?;
        Ok(CheckAnswer {
            status: self.status()?,
            consistent: consistency.is_consistent(),
            consistency,
            integrity: None,
        })
    }

    /// [`Engine::status_checked`] with every file checked ([`Engine::verify`]; the store
    /// with SQLite's full `integrity_check` when `full`).
    pub fn status_verified(&self, full: bool) -> Result<CheckAnswer> {
        let mut answer = self.status_checked()?;
        answer.integrity = Some(self.verify(full)?);
        Ok(answer)
    }
}
