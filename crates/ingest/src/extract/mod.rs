//! Reading formats that are not plain text into Markdown-like text with their structure:
//! PDF ([`pdf`]), DOCX and PPTX ([`office`]), HTML ([`html`]), spreadsheets and CSV
//! ([`sheet`]).
//!
//! Every reader writes through [`Md`]: headings as `#` lines (so the chunker gives each
//! chunk its section path), lists as `- ` lines, tables as pipe tables (whole rows, so the
//! chunker can repeat the header row), images as `![alt](file)` followed by their caption,
//! and the byte offset where each page or slide begins ([`situate_core::Layout`]). A file
//! that cannot be read becomes an error whose text says why (encrypted, no text layer,
//! damaged, not a zip, too large when unpacked), which the caller reports as skipped.

pub mod html;
pub mod office;
pub mod pdf;
pub mod sheet;

use situate_core::{Layout, PlaceUnit};

/// What a reader made of a file.
#[derive(Debug, Clone, Default)]
pub struct Extracted {
    /// Markdown-like text.
    pub text: String,
    /// A title, when the file names one (document properties, `<title>`, the first heading).
    pub title: Option<String>,
    /// Where pages or slides begin.
    pub layout: Layout,
    /// Key/value facts worth keeping with the document (`pages`, `slides`).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Builds Markdown-like text block by block.
#[derive(Debug, Default)]
pub(crate) struct Md {
    text: String,
    layout: Layout,
    pending_unit: Option<u32>,
    in_list: bool,
}

impl Md {
    pub(crate) fn new(unit: Option<PlaceUnit>) -> Md {
        Md {
            layout: Layout {
                unit,
                starts: Vec::new(),
            },
            ..Md::default()
        }
    }

    /// The next block starts page (or slide) `n`.
    pub(crate) fn unit(&mut self, n: u32) {
        self.pending_unit = Some(n);
    }

    fn start_block(&mut self, tight: bool) {
        let sep = if tight && self.in_list { "\n" } else { "\n\n" };
        if !self.text.is_empty() {
            let trimmed = self.text.trim_end_matches('\n').len();
            self.text.truncate(trimmed);
            self.text.push_str(sep);
        }
        if let Some(n) = self.pending_unit.take() {
            self.layout.starts.push((self.text.len(), n));
        }
    }

    /// A heading of `level` (1-6).
    pub(crate) fn heading(&mut self, level: usize, text: &str) {
        let text = one_line(text);
        if text.is_empty() {
            return;
        }
        self.start_block(false);
        self.in_list = false;
        self.text.push_str(&"#".repeat(level.clamp(1, 6)));
        self.text.push(' ');
        self.text.push_str(&text);
    }

    /// A paragraph (its line breaks kept, other runs of white space made one).
    pub(crate) fn para(&mut self, text: &str) {
        let lines: Vec<String> = text
            .lines()
            .map(one_line)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return;
        }
        self.start_block(false);
        self.in_list = false;
        let mut body = lines.join("\n");
        // A paragraph that would read as Markdown syntax is escaped.
        if body.starts_with(['#', '|', '>']) {
            body.insert(0, '\\');
        }
        self.text.push_str(&body);
    }

    /// A list item (consecutive items stay one list).
    pub(crate) fn item(&mut self, text: &str, depth: usize) {
        let text = one_line(text);
        if text.is_empty() {
            return;
        }
        self.start_block(true);
        self.in_list = true;
        self.text.push_str(&"  ".repeat(depth.min(6)));
        self.text.push_str("- ");
        self.text.push_str(&text);
    }

    /// A table: the first row is the header. A table of one column or one row is written
    /// as paragraphs (layout tables are common in HTML and Word files).
    pub(crate) fn table(&mut self, rows: &[Vec<String>]) {
        let rows: Vec<Vec<String>> = rows
            .iter()
            .map(|r| r.iter().map(|c| one_line(c).replace('|', "\\|")).collect())
            .filter(|r: &Vec<String>| r.iter().any(|c| !c.is_empty()))
            .collect();
        let width = rows.iter().map(Vec::len).max().unwrap_or(0);
        if rows.len() < 2 || width < 2 {
            for r in &rows {
                self.para(&r.join(" "));
            }
            return;
        }
        self.start_block(false);
        self.in_list = false;
        let line = |r: &[String]| {
            let mut cells: Vec<&str> = r.iter().map(String::as_str).collect();
            cells.resize(width, "");
            format!("| {} |", cells.join(" | "))
        };
        self.text.push_str(&line(&rows[0]));
        self.text.push('\n');
        self.text.push_str(&format!("|{}", "---|".repeat(width)));
        for r in &rows[1..] {
            self.text.push('\n');
            self.text.push_str(&line(r));
        }
    }

    /// An image: what the source says of it (alt text, file name) and its caption.
    pub(crate) fn image(&mut self, alt: &str, file: &str, caption: Option<&str>) {
        let alt = one_line(alt).replace(['[', ']'], "");
        let file = one_line(file).replace([' ', '(', ')'], "_");
        if alt.is_empty() && file.is_empty() && caption.is_none() {
            return;
        }
        self.start_block(false);
        self.in_list = false;
        self.text.push_str(&format!("![{alt}]({file})"));
        if let Some(c) = caption.map(one_line).filter(|c| !c.is_empty()) {
            self.text.push('\n');
            self.text.push_str(&c);
        }
    }

    /// A code or preformatted block, kept as it is.
    pub(crate) fn code(&mut self, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        self.start_block(false);
        self.in_list = false;
        self.text.push_str("```\n");
        self.text.push_str(text.trim_matches('\n'));
        self.text.push_str("\n```");
    }

    /// The text so far (to look back at the last block).
    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }

    pub(crate) fn finish(mut self) -> (String, Layout) {
        let trimmed = self.text.trim_end().len();
        self.text.truncate(trimmed);
        self.text.push('\n');
        // A page with nothing on it starts where the next one does.
        let len = self.text.len();
        self.layout.starts.retain(|&(s, _)| s < len);
        (self.text, self.layout)
    }
}

/// White space (line breaks included) made single spaces, trimmed.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md_writes_blocks_and_records_where_units_start() {
        let mut md = Md::new(Some(PlaceUnit::Page));
        md.unit(1);
        md.heading(1, "Report\n title");
        md.para("First   line\nsecond line");
        md.item("one", 0);
        md.item("two", 1);
        md.unit(2);
        md.table(&[vec!["A".into(), "B|C".into()], vec!["1".into(), "2".into()]]);
        md.image("a chart", "media/x 1.png", Some("Figure 1: Sales."));
        md.para("# not a heading");
        let (text, layout) = md.finish();
        assert_eq!(
            text,
            "# Report title\n\nFirst line\nsecond line\n\n- one\n  - two\n\n| A | B\\|C |\n|---|---|\n| 1 | 2 |\n\n![a chart](media/x_1.png)\nFigure 1: Sales.\n\n\\# not a heading\n"
        );
        assert_eq!(layout.starts[0], (0, 1));
        assert_eq!(&text[layout.starts[1].0..layout.starts[1].0 + 5], "| A |");
    }
}
