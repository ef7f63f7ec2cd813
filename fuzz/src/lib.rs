//! Helpers shared by the fuzz targets: a scratch directory per process, in memory when the
//! machine has `/dev/shm`, for the readers that take a path.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's scratch directory (made once).
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("situate-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    })
}

/// Writes `data` to `name` in the scratch directory and returns its path.
pub fn file(name: &str, data: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, data).expect("scratch file");
    p
}

/// `data` split at its first byte: a selector and the rest.
pub fn select(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    }
}
