//! The allocator setting every front end makes first thing in `main`.

/// Keeps freed memory in the process for reuse; the binaries (the CLI with its service, the
/// benchmarks) call it first thing in `main`, before any thread starts. The library never
/// calls it: the allocator is the program's choice.
///
/// By default glibc serves every block above a sliding threshold (at first 128 KiB) with a
/// fresh `mmap` and gives it back on free, and trims the heap's top whenever 128 KiB are
/// free there, so the tensors of every forward pass (a model's activations: megabytes each)
/// cost zeroed pages from the kernel again and again: perf put about a tenth of MiniLM's
/// passage embedding in page faults and page clearing. Here blocks up to 1 GiB come from
/// the heap, and freed memory is kept rather than trimmed. The cost: the process keeps its
/// peak heap. Measured in BENCHMARKS.md ("Embedding").
///
/// That cost multiplies with glibc's arenas: by default a thread that finds the arenas busy
/// gets one of its own, up to eight per core, and each keeps its own peak. A query node's
/// readers reopen the index after every batch the follower commits, each on its own
/// thread, so their freed blocks sat in many arenas none of the others could reuse: in
/// `bench/soak.sh --nodes` resident memory grew 13% and 28% in 30 minutes, and with writes
/// every 5 s by 63 MiB in 5 minutes. Capped at one arena per core, the same run stayed
/// flat (RELIABILITY.md, "Load").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_malloc() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only sets allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// Nothing to tune outside glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_malloc() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    /// glibc accepts both values (`mallopt` returns 1 when it does, 0 when it refuses a
    /// value and silently keeps its default).
    #[test]
    fn glibc_accepts_the_settings() {
        // SAFETY: mallopt only sets allocator parameters.
        unsafe {
            assert_eq!(libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30), 1);
            assert_eq!(libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30), 1);
            assert_eq!(libc::mallopt(libc::M_ARENA_MAX, 2), 1);
        }
        super::tune_malloc();
    }
}
