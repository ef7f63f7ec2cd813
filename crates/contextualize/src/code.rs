//! Finding the items (modules, classes, functions) that enclose a position in source code.
//!
//! A line scanner, not a parser: definitions are recognised by a few patterns common to
//! Rust, Python, Java/Kotlin/C#, C/C++, Go and JavaScript/TypeScript, and nesting by
//! indentation, which holds for conventionally formatted code in all of them. A full parser
//! per language (tree-sitter) would cost a compiled grammar each for a context that only
//! needs names.

use regex::Regex;
use std::sync::OnceLock;

fn definition_patterns() -> &'static [(Regex, &'static str)] {
    static P: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    P.get_or_init(|| {
        let raw: &[(&str, &str)] = &[
            // Rust
            (r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:async|unsafe|const|extern\s+\S+)\s+)*fn\s+([A-Za-z_]\w*)", "fn"),
            (r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?impl\b(?:\s*<[^{]*?>)?\s+([^{]+?)\s*(?:where\b.*)?\{?\s*$", "impl"),
            (r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?trait\s+([A-Za-z_]\w*)", "trait"),
            (r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*\{", "mod"),
            // Python
            (r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)", "def"),
            // classes, interfaces, structs, enums (Python, Java, C#, Kotlin, C++, JS/TS, Rust)
            (r"^\s*(?:(?:public|private|protected|internal|static|final|abstract|sealed|export|default|data|open|pub(?:\([^)]*\))?)\s+)*(class|interface|struct|enum|record|object|union)\s+([A-Za-z_]\w*)", ""),
            (r"^\s*namespace\s+([A-Za-z_][\w:.]*)", "namespace"),
            // Go
            (r"^func\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)", "func"),
            // JavaScript / TypeScript
            (r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)", "function"),
            // Java / C# / C / C++ methods and functions: `type name(args) {` or `type name(args)` at the end of a line
            (r"^\s*(?:(?:public|private|protected|static|final|abstract|synchronized|native|virtual|override|inline|extern|const|unsafe|async)\s+)*[A-Za-z_][\w:<>,\[\]\*&\s]*?[\s\*&]([A-Za-z_][\w:~]*)\s*\([^;]*\)\s*(?:const\s*)?(?:noexcept\s*)?(?:throws\s+[\w.,\s]+)?\{?\s*$", "fn"),
        ];
        raw.iter()
            .map(|(re, kind)| (Regex::new(re).expect("static pattern is valid"), *kind))
            .collect()
    })
}

const NOT_NAMES: &[&str] = &[
    "if", "for", "while", "switch", "catch", "return", "else", "new", "sizeof", "elif",
];

/// The definition a line opens, as `kind name`, if any.
fn definition(line: &str) -> Option<String> {
    for (re, kind) in definition_patterns() {
        if let Some(c) = re.captures(line) {
            let (kind, name) = if kind.is_empty() {
                (c.get(1)?.as_str(), c.get(2)?.as_str())
            } else {
                (*kind, c.get(1)?.as_str())
            };
            let name = name.trim();
            if name.is_empty() || NOT_NAMES.contains(&name) {
                return None;
            }
            return Some(format!("{kind} {name}"));
        }
    }
    None
}

fn indent(line: &str) -> usize {
    line.chars()
        .take_while(|c| c.is_whitespace())
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

/// An open item: its indentation, or for namespaces (whose bodies are conventionally not
/// indented) the brace depth inside it.
enum Open {
    Indented(usize),
    Braced(i64),
}

/// The names of the items that enclose byte `pos` of `text`, outermost first.
pub fn enclosing_items(text: &str, pos: usize) -> Vec<String> {
    enclosing_items_at(text, &[pos]).pop().unwrap_or_default()
}

/// [`enclosing_items`] for several positions in one pass over the text (positions in any
/// order; one result per position, in the order given).
pub fn enclosing_items_at(text: &str, positions: &[usize]) -> Vec<Vec<String>> {
    let mut order: Vec<usize> = (0..positions.len()).collect();
    order.sort_by_key(|&i| positions[i]);
    let mut out = vec![Vec::new(); positions.len()];
    let mut next = 0;
    let mut stack: Vec<(Open, String)> = Vec::new();
    let mut depth: i64 = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        while next < order.len() && positions[order[next]] <= at {
            out[order[next]] = stack.iter().map(|(_, d)| d.clone()).collect();
            next += 1;
        }
        if next == order.len() {
            break;
        }
        at += line.len();
        let trimmed = line.trim();
        let comment = trimmed.starts_with("//")
            || (trimmed.starts_with('#') && !trimmed.starts_with("#["))
            || trimmed.starts_with('*')
            || trimmed.starts_with("/*");
        if trimmed.is_empty() || comment {
            continue;
        }
        let ind = indent(line);
        let before = depth;
        depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
        // A line at or left of an item's own indentation ends that item, unless it is the
        // item's opening brace on its own line; a namespace ends with its closing brace.
        stack.retain(|(open, _)| match open {
            Open::Indented(i) => *i < ind || (trimmed == "{" && *i == ind),
            Open::Braced(d) => depth >= *d,
        });
        if let Some(def) = definition(line) {
            let open = if def.starts_with("namespace ") {
                Open::Braced(before + 1)
            } else {
                Open::Indented(ind)
            };
            stack.push((open, def));
        }
    }
    for &i in &order[next..] {
        out[i] = stack.iter().map(|(_, d)| d.clone()).collect();
    }
    out
}

/// A display name for a language code (`rust` → `Rust`).
pub fn display_lang(lang: &str) -> String {
    match lang {
        "cpp" => "C++".into(),
        "csharp" => "C#".into(),
        "javascript" => "JavaScript".into(),
        "typescript" => "TypeScript".into(),
        "objc" => "Objective-C".into(),
        "c" | "r" => lang.to_uppercase(),
        _ => {
            let mut c = lang.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        }
    }
}

/// Whether a text of unknown kind reads as source code (for corpus records such as
/// Anthropic's codebase chunks): at least a fifth of its first lines look like code.
pub fn looks_like_code(text: &str) -> bool {
    let mut lines = 0;
    let mut codey = 0;
    for l in text.lines().take(200) {
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        lines += 1;
        if t.ends_with(['{', '}', ';', ')', ':'])
            || t.starts_with("//")
            || t.starts_with("#include")
            || t.starts_with("import ")
            || t.starts_with("use ")
            || definition(l).is_some()
        {
            codey += 1;
        }
    }
    lines > 0 && codey * 5 >= lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, needle: &str) -> Vec<String> {
        enclosing_items(text, text.find(needle).expect("needle present"))
    }

    #[test]
    fn python_classes_and_methods() {
        let t = "import os\n\nclass Store:\n    def get(self, k):\n        return self.d[k]\n\n    def put(self, k, v):\n        self.d[k] = v\n\ndef main():\n    pass\n";
        assert_eq!(at(t, "return self"), vec!["class Store", "def get"]);
        assert_eq!(at(t, "self.d[k] = v"), vec!["class Store", "def put"]);
        assert_eq!(at(t, "pass"), vec!["def main"]);
    }

    #[test]
    fn java_class_and_method() {
        let t = "package a;\n\npublic class Hasher {\n    private int rounds;\n\n    public String hash(String pw) throws Exception {\n        return pw;\n    }\n}\n";
        assert_eq!(at(t, "return pw"), vec!["class Hasher", "fn hash"]);
        assert_eq!(at(t, "private int"), vec!["class Hasher"]);
    }

    #[test]
    fn cpp_go_and_js() {
        let t = "namespace clickhouse {\n\nvoid Client::Insert(const std::string& table)\n{\n    Send(table);\n}\n\n}\n";
        assert_eq!(
            at(t, "Send(table)"),
            vec!["namespace clickhouse", "fn Client::Insert"]
        );
        let g = "package main\n\nfunc (s *Server) Serve() error {\n\treturn nil\n}\n";
        assert_eq!(at(g, "return nil"), vec!["func Serve"]);
        let j = "export async function load(url) {\n  if (x) {\n    fetch(url);\n  }\n}\n";
        assert_eq!(at(j, "fetch"), vec!["function load"]);
    }

    #[test]
    fn items_that_ended_are_not_enclosing() {
        let t = "fn a() {\n    one();\n}\n\nfn b() {\n    two();\n}\n";
        assert_eq!(at(t, "two"), vec!["fn b"]);
        assert_eq!(enclosing_items(t, t.len()), Vec::<String>::new());
    }

    #[test]
    fn one_pass_agrees_with_single_positions() {
        let t = "class A:\n    def f(self):\n        x = 1\n\nclass B:\n    def g(self):\n        y = 2\n";
        let positions = [
            t.find("y = 2").expect("y"),
            0,
            t.find("x = 1").expect("x"),
            t.len(),
        ];
        let all = enclosing_items_at(t, &positions);
        for (p, got) in positions.iter().zip(&all) {
            assert_eq!(got, &enclosing_items(t, *p));
        }
        assert_eq!(all[0], vec!["class B", "def g"]);
    }

    #[test]
    fn code_detection() {
        assert!(looks_like_code(
            "use std::io;\n\nfn main() {\n    println!(\"hi\");\n}\n"
        ));
        assert!(!looks_like_code(
            "The cat sat on the mat.\nIt was a sunny day.\nBirds sang."
        ));
    }
}
