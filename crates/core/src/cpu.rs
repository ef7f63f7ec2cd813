//! The vector instructions situate's own kernels use, chosen once per process at run time.
//!
//! One build runs on every x86-64 CPU: each kernel is compiled for several instruction
//! sets (`#[target_feature]` functions beside a portable one) and takes the path of the
//! [`Level`] chosen here, as ONNX Runtime's MLAS and llama.cpp's `GGML_CPU_ALL_VARIANTS`
//! do. The level is the best this CPU runs, unless `SITUATE_CPU` forces a lower one (to
//! compare paths, or to reproduce a result of another machine):
//!
//! | `SITUATE_CPU` | what the kernels may use |
//! |---|---|
//! | `scalar` | no vector instructions beyond the x86-64 baseline (SSE2) |
//! | `avx2` | AVX2 and FMA |
//! | `avxvnni` | AVX2, FMA and AVX-VNNI (256-bit `vpdpbusd`) |
//! | `avx512` | AVX2, FMA, AVX-512 F/BW/VL |
//! | `avx512vnni` | the same and AVX-512 VNNI |
//! | `auto` (or unset) | the best of these this CPU runs |
//!
//! A level the CPU does not run, or an unknown name, is an error ([`check`], which every
//! engine call that opens an index makes); until then the kernels use the detected level.
//! Off x86-64 every level is `scalar`.

use std::sync::OnceLock;

/// The environment variable that forces a level.
pub const ENV: &str = "SITUATE_CPU";

/// An instruction-set level of situate's kernels (module docs). Ordered from the least to
/// the most the kernels may use, but not every CPU runs every level below its best (an
/// AVX-512 VNNI CPU may lack AVX-VNNI): [`Level::runs_here`] says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// The x86-64 baseline (or another architecture).
    Scalar,
    /// AVX2 and FMA.
    Avx2,
    /// AVX2, FMA and AVX-VNNI.
    AvxVnni,
    /// AVX2, FMA and AVX-512 F/BW/VL.
    Avx512,
    /// AVX-512 with VNNI.
    Avx512Vnni,
}

impl Level {
    /// Every level, from the least.
    pub const ALL: [Level; 5] = [
        Level::Scalar,
        Level::Avx2,
        Level::AvxVnni,
        Level::Avx512,
        Level::Avx512Vnni,
    ];

    /// Its name in `SITUATE_CPU`, `stats` and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::AvxVnni => "avxvnni",
            Level::Avx512 => "avx512",
            Level::Avx512Vnni => "avx512vnni",
        }
    }

    /// The level named `name` (`auto` is not a level: see [`chosen`]).
    pub fn parse(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether this CPU runs every instruction the level allows.
    pub fn runs_here(self) -> bool {
        let f = features();
        match self {
            Level::Scalar => true,
            Level::Avx2 => f.avx2,
            Level::AvxVnni => f.avx2 && f.avx_vnni,
            Level::Avx512 => f.avx2 && f.avx512,
            Level::Avx512Vnni => f.avx2 && f.avx512 && f.avx512_vnni,
        }
    }

    /// AVX2 and FMA allowed.
    #[inline(always)]
    pub fn avx2(self) -> bool {
        self >= Level::Avx2
    }

    /// AVX-512 F, BW and VL allowed (with AVX2 and FMA).
    #[inline(always)]
    pub fn avx512(self) -> bool {
        self >= Level::Avx512
    }

    /// AVX-512 VNNI allowed.
    #[inline(always)]
    pub fn avx512_vnni(self) -> bool {
        self == Level::Avx512Vnni
    }

    /// AVX-VNNI (the 256-bit `vpdpbusd`) allowed: at its own level, or beside AVX-512
    /// VNNI where the CPU has both.
    #[inline(always)]
    pub fn avx_vnni(self) -> bool {
        self == Level::AvxVnni || (self == Level::Avx512Vnni && features().avx_vnni)
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the CPU has, detected once.
#[derive(Debug, Clone, Copy, Default)]
struct Features {
    avx2: bool,
    avx_vnni: bool,
    avx512: bool,
    avx512_vnni: bool,
}

fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma");
            Features {
                avx2,
                avx_vnni: avx2 && has!("avxvnni"),
                avx512: avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl"),
                avx512_vnni: has!("avx512vnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features::default()
        }
    })
}

/// The best level this CPU runs.
pub fn detected() -> Level {
    Level::ALL
        .into_iter()
        .rev()
        .find(|l| l.runs_here())
        .unwrap_or(Level::Scalar)
}

/// Every level this CPU runs, from the least (what the tests compare against the scalar
/// path).
pub fn levels_here() -> Vec<Level> {
    Level::ALL.into_iter().filter(|l| l.runs_here()).collect()
}

/// `SITUATE_CPU` read and checked once: the level it forces, or why it cannot.
fn forced() -> &'static Result<Option<Level>, String> {
    static FORCED: OnceLock<Result<Option<Level>, String>> = OnceLock::new();
    FORCED.get_or_init(|| {
        let Ok(value) = std::env::var(ENV) else {
            return Ok(None);
        };
        let value = value.trim().to_ascii_lowercase();
        if value.is_empty() || value == "auto" {
            return Ok(None);
        }
        let here = levels_here()
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(", ");
        match Level::parse(&value) {
            Some(l) if l.runs_here() => Ok(Some(l)),
            Some(l) => Err(format!(
                "{ENV}={value}: this CPU does not run {l}; it runs {here} (or auto)"
            )),
            None => Err(format!(
                "{ENV}={value}: expected auto, scalar, avx2, avxvnni, avx512 or avx512vnni; this CPU runs {here}"
            )),
        }
    })
}

/// An error when `SITUATE_CPU` names a level this CPU does not run, or no level.
pub fn check() -> Result<(), String> {
    forced().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The level every kernel uses: the forced one, else the detected one (also while
/// `SITUATE_CPU` is wrong: [`check`] reports that).
#[inline]
pub fn chosen() -> Level {
    static CHOSEN: OnceLock<Level> = OnceLock::new();
    *CHOSEN.get_or_init(|| match forced() {
        Ok(Some(l)) => *l,
        _ => detected(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_by_name_and_the_detected_one_runs_here() {
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()), Some(l));
        }
        assert_eq!(Level::parse("sse4"), None);
        assert!(detected().runs_here());
        assert!(Level::Scalar.runs_here());
        assert_eq!(levels_here().first(), Some(&Level::Scalar));
        assert_eq!(levels_here().last(), Some(&detected()));
        // A level runs here only if every level it implies does.
        for l in levels_here() {
            if l.avx2() {
                assert!(Level::Avx2.runs_here(), "{l}");
            }
            if l.avx512() {
                assert!(Level::Avx512.runs_here(), "{l}");
            }
        }
        assert!(!Level::Scalar.avx2() && Level::Avx2.avx2() && !Level::Avx2.avx512());
        assert!(Level::Avx512Vnni.avx512() && Level::Avx512Vnni.avx512_vnni());
        assert!(Level::AvxVnni.avx_vnni() && !Level::AvxVnni.avx512());
    }
}
