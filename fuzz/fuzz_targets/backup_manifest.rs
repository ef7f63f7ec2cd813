#![no_main]
//! Fuzz target `backup_manifest` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = situate_fuzz::scratch().join("backup");
    let _ = std::fs::create_dir_all(&dir);
    std::fs::write(dir.join("situate-backup.json"), data).expect("write");
    let _ = situate_engine::Engine::check_backup(&dir);
});
