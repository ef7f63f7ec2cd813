//! PDF: the text layer in reading order, page by page, with its structure.
//!
//! `lopdf` parses the file and `pdf-extract` interprets each page's content stream (fonts,
//! encodings, ToUnicode maps), handing every glyph with its position and size to
//! [`Glyphs`]. The layout is situate's own (no crate does it from positions):
//! - glyphs on one baseline form runs; a wide gap starts a new segment;
//! - segments at one height form rows; a run of rows holding two long segments side by side
//!   is a two-column region, read left column first; rows of several aligned short
//!   segments are a table;
//! - lines set larger than the body text are headings (the larger, the higher); so is a
//!   line that names an entry of the outline (bookmarks) on its page, below the sized ones
//!   by its outline depth (bold headings set at the body size are found this way);
//! - lines that repeat near the top or bottom of most pages (digits aside: "Page 3 of 9")
//!   are running headers and footers and are dropped;
//! - a word hyphenated at a line end is joined; a line starting with a bullet (•, ▪, ...)
//!   starts a list item.
//!
//! Pages are read one at a time, each laid out as it ends; only their text is kept. A file
//! without a text layer (a scan), an encrypted or a damaged one is refused with that reason.
//! `pdf-extract` panics on some malformed content streams: the pass runs under
//! `catch_unwind`, and after a panic the pages are read again one by one, so such a page is
//! reported as unreadable and the rest is kept.

mod loops;

use super::{Extracted, Md};
use situate_core::PlaceUnit;
use std::collections::{BTreeMap, HashMap};

/// One glyph: where it starts (x from the left, y from the top, in points), its advance,
/// its size, and its text.
#[derive(Debug, Clone)]
struct Glyph {
    x: f64,
    y: f64,
    advance: f64,
    size: f64,
    text: String,
}

/// Collects the glyphs of a page, and lays each page out as it ends (so only one page's
/// glyphs are ever held).
#[derive(Default)]
struct Glyphs {
    number: u32,
    height: f64,
    width: f64,
    glyphs: Vec<Glyph>,
    pages: Vec<Page>,
}

impl pdf_extract::OutputDev for Glyphs {
    fn begin_page(
        &mut self,
        page_num: u32,
        media_box: &pdf_extract::MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), pdf_extract::OutputError> {
        self.number = page_num;
        self.height = media_box.ury - media_box.lly;
        self.width = media_box.urx - media_box.llx;
        self.glyphs.clear();
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), pdf_extract::OutputError> {
        let glyphs = std::mem::take(&mut self.glyphs);
        let page = layout_page(self.number, self.height, self.width, glyphs);
        self.pages.push(page);
        Ok(())
    }

    fn output_character(
        &mut self,
        trm: &pdf_extract::Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        char: &str,
    ) -> Result<(), pdf_extract::OutputError> {
        // The glyph's origin in page space, y flipped to grow downwards, and its size
        // through the text rendering matrix (as pdf-extract's own text output does).
        let (vx, vy) = (
            font_size * (trm.m11 + trm.m21),
            font_size * (trm.m12 + trm.m22),
        );
        let size = (vx * vy).abs().sqrt();
        if !size.is_finite() || size <= 0.0 {
            return Ok(());
        }
        self.glyphs.push(Glyph {
            x: trm.m31,
            y: self.height - trm.m32,
            advance: width * size,
            size,
            text: char.to_string(),
        });
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), pdf_extract::OutputError> {
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), pdf_extract::OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), pdf_extract::OutputError> {
        Ok(())
    }
}

/// Glyphs on one baseline with no wide gap: a piece of a line.
#[derive(Debug, Clone)]
struct Segment {
    x0: f64,
    x1: f64,
    y: f64,
    size: f64,
    text: String,
}

/// A line of the page in reading order, or a table.
#[derive(Debug, Clone)]
enum Line {
    Text { text: String, size: f64, y: f64 },
    Table(Vec<Vec<String>>),
}

/// One page after layout.
struct Page {
    number: u32,
    height: f64,
    lines: Vec<Line>,
}

/// Reads a PDF.
pub fn read_pdf(bytes: Vec<u8>) -> Result<Extracted, String> {
    let mut doc = lopdf::Document::load_mem(&bytes).map_err(|e| match e {
        lopdf::Error::Decryption(_) | lopdf::Error::InvalidPassword => {
            "encrypted PDF (a password is needed to read it)".to_string()
        }
        e => format!("damaged PDF: {e}"),
    })?;
    drop(bytes);
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        return Err("encrypted PDF (a password is needed to read it)".into());
    }
    if doc.is_encrypted() {
        return Err("encrypted PDF (a password is needed to read it)".into());
    }
    let page_ids = doc.get_pages();
    let page_numbers: Vec<u32> = page_ids.keys().copied().collect();
    if page_numbers.is_empty() {
        return Err("damaged PDF: it has no pages".into());
    }
    // Pages the interpreter would never finish (loops, runaway nesting) are skipped.
    let mut forms = loops::Forms::default();
    let looping: BTreeMap<u32, String> = page_ids
        .iter()
        .filter_map(|(&n, &id)| Some((n, loops::page_problem(&doc, id, &mut forms)?)))
        .collect();
    // All pages in one pass (pdf-extract's page lookup is linear per call, so a page at a
    // time costs O(pages²)); when the interpreter fails somewhere, or a page must be
    // skipped, again page by page, so one bad page costs only itself.
    let mut unreadable = Vec::new();
    let one_pass = if looping.is_empty() {
        interpret(&doc, None).ok()
    } else {
        None
    };
    let mut pages = match one_pass {
        Some(pages) => pages,
        None => {
            let mut pages = Vec::with_capacity(page_numbers.len());
            for &n in &page_numbers {
                if looping.contains_key(&n) {
                    unreadable.push(n);
                    continue;
                }
                match interpret(&doc, Some(n)) {
                    Ok(p) => pages.extend(p),
                    Err(_) => unreadable.push(n),
                }
            }
            pages
        }
    };
    let chars: usize = pages
        .iter()
        .flat_map(|p| &p.lines)
        .map(|l| match l {
            Line::Text { text, .. } => text.chars().filter(|c| !c.is_whitespace()).count(),
            Line::Table(rows) => rows.iter().flatten().map(|c| c.len()).sum(),
        })
        .sum();
    if pages.is_empty() {
        let why = match looping.iter().next() {
            Some((n, why)) => format!(" (page {n}: {why})"),
            None => String::new(),
        };
        return Err(format!(
            "damaged PDF: none of its {} pages could be read{why}",
            page_numbers.len()
        ));
    }
    if chars == 0 {
        return Err(
            "no text layer (a scanned or image-only PDF): run OCR on it first, e.g. ocrmypdf"
                .into(),
        );
    }
    let title = doc_title(&doc);
    let outline = outline(&doc);
    remove_running_lines(&mut pages);
    let body = body_size(&pages);
    let levels = heading_levels(&pages, body);
    let mut md = Md::new(Some(PlaceUnit::Page));
    let mut first_heading = None;
    let mut empty_pages = Vec::new();
    for page in &pages {
        md.unit(page.number);
        let before = md.len();
        write_page(page, body, &levels, &outline, &mut md, &mut first_heading);
        if md.len() == before {
            empty_pages.push(page.number);
        }
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert("pages".into(), page_numbers.len().into());
    if !empty_pages.is_empty() {
        metadata.insert("pages_without_text".into(), empty_pages.into());
    }
    if !unreadable.is_empty() {
        metadata.insert("unreadable_pages".into(), unreadable.into());
    }
    if !looping.is_empty() {
        let reasons: serde_json::Map<String, serde_json::Value> = looping
            .into_iter()
            .map(|(n, why)| (n.to_string(), why.into()))
            .collect();
        metadata.insert("unreadable_reasons".into(), reasons.into());
    }
    let (text, layout) = md.finish();
    Ok(Extracted {
        text,
        title: title.or(first_heading),
        layout,
        metadata,
    })
}

/// Every page (`None`) or page `n`, laid out; a panic inside the interpreter is an error.
fn interpret(doc: &lopdf::Document, n: Option<u32>) -> Result<Vec<Page>, String> {
    quiet_panics::install();
    let result = quiet_panics::run(|| {
        let mut g = Glyphs::default();
        match n {
            None => pdf_extract::output_doc(doc, &mut g),
            Some(n) => pdf_extract::output_doc_page(doc, &mut g, n),
        }
        .map(|()| g.pages)
    });
    match result {
        Ok(Ok(pages)) => Ok(pages),
        Ok(Err(e)) => Err(e.to_string()),
        Err(()) => Err("the content could not be interpreted".into()),
    }
}

/// The outline's entries: (page, title as compared) → depth from 1. A damaged outline is no
/// outline.
fn outline(doc: &lopdf::Document) -> HashMap<(u32, String), usize> {
    if !loops::outline_is_sound(doc) {
        return HashMap::new();
    }
    quiet_panics::install();
    let Ok(toc) = quiet_panics::run(|| doc.get_toc()) else {
        return HashMap::new();
    };
    toc.map(|t| {
        t.toc
            .into_iter()
            .filter(|e| e.level >= 1)
            .map(|e| ((e.page as u32, compared(&e.title)), e.level))
            .collect()
    })
    .unwrap_or_default()
}

/// A title as outlines and lines are compared: letters and digits, lower case.
fn compared(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The document information's title, when it is set and not a file name.
fn doc_title(doc: &lopdf::Document) -> Option<String> {
    let info = doc.trailer.get(b"Info").ok()?;
    let info = match info {
        lopdf::Object::Reference(id) => doc.get_object(*id).ok()?,
        o => o,
    };
    let title = info.as_dict().ok()?.get(b"Title").ok()?;
    let bytes = title.as_str().ok()?;
    let text = if bytes.starts_with(&[0xFE, 0xFF]) {
        let units: Vec<u16> = bytes[2..]
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        String::from_utf16_lossy(&units)
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    };
    let t = super::one_line(&text);
    (!t.is_empty() && !t.to_lowercase().ends_with(".pdf")).then_some(t)
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3000..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF)
}

// Long: the four steps its summary names, each over the vectors the step before built.
/// Glyphs → segments → rows → reading-order lines.
fn layout_page(number: u32, height: f64, width: f64, glyphs: Vec<Glyph>) -> Page {
    let mut segments: Vec<Segment> = Vec::new();
    for glyph in glyphs {
        let text = glyph.text.replace('\u{00a0}', " ");
        if let Some(s) = segments.last_mut() {
            let same_line = (glyph.y - s.y).abs() < 0.3 * s.size.max(glyph.size);
            let gap = glyph.x - s.x1;
            if same_line && gap > -0.5 * s.size && gap < 1.5 * s.size.max(glyph.size) {
                if gap > 0.15 * s.size && !s.text.ends_with(' ') && !text.starts_with(' ') {
                    s.text.push(' ');
                }
                s.text.push_str(&text);
                s.x1 = s.x1.max(glyph.x + glyph.advance);
                s.size = s.size.max(glyph.size);
                continue;
            }
        }
        if text.trim().is_empty() {
            continue;
        }
        segments.push(Segment {
            x0: glyph.x,
            x1: glyph.x + glyph.advance,
            y: glyph.y,
            size: glyph.size,
            text,
        });
    }
    for s in &mut segments {
        s.text = s.text.trim().to_string();
    }
    segments.retain(|s| !s.text.is_empty());
    // Rows: segments at one height, top to bottom, left to right.
    segments.sort_by(|a, b| a.y.total_cmp(&b.y));
    let mut rows: Vec<Vec<Segment>> = Vec::new();
    for s in segments {
        match rows.last_mut() {
            Some(r) if (r[0].y - s.y).abs() < 0.5 * r[0].size.min(s.size) => r.push(s),
            _ => rows.push(vec![s]),
        }
    }
    for r in &mut rows {
        r.sort_by(|a, b| a.x0.total_cmp(&b.x0));
    }
    let width = if width > 0.0 { width } else { 612.0 };
    let mut lines = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        // A two-column region: rows of two long segments with the right one starting at
        // (about) the same place.
        let columns = |r: &Vec<Segment>, split: Option<f64>| {
            r.len() == 2
                && r[0].x1 < r[1].x0
                && r[1].x0 > width * 0.35
                && (r[0].x1 - r[0].x0) > width * 0.2
                && (r[1].x1 - r[1].x0) > width * 0.2
                && split.is_none_or(|x| (r[1].x0 - x).abs() < 2.0 * r[1].size)
        };
        if columns(&rows[i], None) {
            let split = rows[i][1].x0;
            let mut j = i + 1;
            while j < rows.len() && columns(&rows[j], Some(split)) {
                j += 1;
            }
            if j - i >= 2 {
                for side in 0..2 {
                    for r in &rows[i..j] {
                        lines.push(Line::Text {
                            text: r[side].text.clone(),
                            size: r[side].size,
                            y: r[side].y,
                        });
                    }
                }
                i = j;
                continue;
            }
        }
        // A table: rows of two or more segments whose starts line up with the first row's.
        let aligned = |a: &Vec<Segment>, b: &Vec<Segment>| {
            a.len() >= 2
                && a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(p, q)| (p.x0 - q.x0).abs() < 1.5 * p.size.max(q.size))
        };
        if rows[i].len() >= 2 {
            let mut j = i + 1;
            while j < rows.len() && aligned(&rows[i], &rows[j]) {
                j += 1;
            }
            if j - i >= 2 {
                lines.push(Line::Table(
                    rows[i..j]
                        .iter()
                        .map(|r| r.iter().map(|s| s.text.clone()).collect())
                        .collect(),
                ));
                i = j;
                continue;
            }
        }
        let r = &rows[i];
        let text = r
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let size = r.iter().map(|s| s.size).fold(0.0, f64::max);
        lines.push(Line::Text {
            text,
            size,
            y: r[0].y,
        });
        i += 1;
    }
    Page {
        number,
        height,
        lines,
    }
}

/// Drops lines near the top or bottom of the page that repeat (digits aside) on most pages.
fn remove_running_lines(pages: &mut [Page]) {
    if pages.len() < 2 {
        return;
    }
    let key = |text: &str| -> String {
        text.chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let in_margin = |y: f64, height: f64| height > 0.0 && (y < height * 0.12 || y > height * 0.88);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for p in pages.iter() {
        let mut on_page: Vec<String> = p
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Text { text, y, .. } if in_margin(*y, p.height) => Some(key(text)),
                _ => None,
            })
            .collect();
        on_page.sort();
        on_page.dedup();
        for k in on_page {
            *seen.entry(k).or_default() += 1;
        }
    }
    let most = pages.len().div_ceil(2).max(2);
    for p in pages.iter_mut() {
        let height = p.height;
        p.lines.retain(|l| match l {
            Line::Text { text, y, .. } if in_margin(*y, height) => {
                seen.get(&key(text)).copied().unwrap_or(0) < most
            }
            _ => true,
        });
    }
}

/// The body text's size: the size most characters are set in (half points).
fn body_size(pages: &[Page]) -> f64 {
    let mut by_size: HashMap<i64, usize> = HashMap::new();
    for l in pages.iter().flat_map(|p| &p.lines) {
        if let Line::Text { text, size, .. } = l {
            *by_size.entry((size * 2.0).round() as i64).or_default() += text.chars().count();
        }
    }
    by_size
        .into_iter()
        .max_by_key(|&(s, n)| (n, -s))
        .map_or(10.0, |(s, _)| s as f64 / 2.0)
}

/// Heading levels by size: every size set clearly larger than the body, largest first →
/// level 1, 2, ... A size that sets running text is not a heading size: one that sets much
/// of the text, or runs of more than three lines (an introduction in a larger font).
fn heading_levels(pages: &[Page], body: f64) -> Vec<i64> {
    // Per size: characters, and the longest run of consecutive lines.
    let mut by_size: HashMap<i64, (usize, usize)> = HashMap::new();
    let mut total = 0usize;
    for p in pages {
        let mut run: Option<(i64, usize)> = None;
        for l in &p.lines {
            let Line::Text { text, size, .. } = l else {
                run = None;
                continue;
            };
            let key = (size * 2.0).round() as i64;
            let n = text.chars().count();
            total += n;
            let length = match run {
                Some((k, len)) if k == key => len + 1,
                _ => 1,
            };
            run = Some((key, length));
            let e = by_size.entry(key).or_default();
            e.0 += n;
            e.1 = e.1.max(length);
        }
    }
    let mut sizes: Vec<i64> = by_size
        .into_iter()
        .filter(|&(size, (chars, longest))| {
            size as f64 / 2.0 >= body * 1.15 && longest <= 3 && chars * 100 <= total * 15
        })
        .map(|(size, _)| size)
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes.truncate(6);
    sizes
}

/// Writes one page: headings, paragraphs (lines joined, hyphenation undone), tables,
/// captions as paragraphs of their own.
fn write_page(
    page: &Page,
    body: f64,
    levels: &[i64],
    outline: &HashMap<(u32, String), usize>,
    md: &mut Md,
    first_heading: &mut Option<String>,
) {
    let mut para = String::new();
    let mut last: Option<(f64, f64)> = None; // (size, y) of the paragraph's last line
    // A heading set on two or more lines is one heading: (level, text, size, y).
    let mut heading: Option<(usize, String, f64, f64)> = None;
    let flush_heading = |heading: &mut Option<(usize, String, f64, f64)>,
                         md: &mut Md,
                         first: &mut Option<String>| {
        if let Some((level, text, _, _)) = heading.take() {
            if first.is_none() {
                *first = Some(text.clone());
            }
            md.heading(level, &text);
        }
    };
    let flush = |para: &mut String, md: &mut Md| {
        if !para.trim().is_empty() {
            md.para(para);
        }
        para.clear();
    };
    for line in &page.lines {
        if !matches!(line, Line::Text { .. }) {
            flush_heading(&mut heading, md, first_heading);
        }
        match line {
            Line::Table(rows) => {
                flush(&mut para, md);
                last = None;
                md.table(rows);
            }
            Line::Text { text, size, y } => {
                let key = (size * 2.0).round() as i64;
                let level = levels
                    .iter()
                    .position(|&s| s == key)
                    .map(|l| l + 1)
                    .or_else(|| {
                        let depth = outline.get(&(page.number, compared(text)))?;
                        Some(levels.len() + depth)
                    });
                if let Some(level) = level {
                    flush(&mut para, md);
                    last = None;
                    match heading.as_mut() {
                        Some((l, t, s, hy))
                            if *l == level && *y - *hy > 0.0 && *y - *hy <= 1.6 * *s =>
                        {
                            join_line(t, text);
                            *hy = *y;
                        }
                        _ => {
                            flush_heading(&mut heading, md, first_heading);
                            heading = Some((level, text.clone(), *size, *y));
                        }
                    }
                    continue;
                }
                flush_heading(&mut heading, md, first_heading);
                let caption =
                    crate::chunk::is_figure_caption(text) || crate::chunk::is_table_caption(text);
                let continues = last.is_some_and(|(s, ly)| {
                    (s - size).abs() < 0.6 && *y - ly > 0.0 && *y - ly <= 1.7 * size.max(body)
                });
                // A line that starts with a bullet starts a list item.
                let bullet = text
                    .strip_prefix(['•', '◦', '▪', '●', '‣', '∙', '■', '□'])
                    .map(str::trim_start);
                if caption || !continues || bullet.is_some() {
                    flush(&mut para, md);
                }
                match bullet {
                    Some(item) => {
                        para.push_str("- ");
                        para.push_str(item);
                    }
                    None => join_line(&mut para, text),
                }
                last = Some((*size, *y));
                if caption {
                    flush(&mut para, md);
                    last = None;
                }
            }
        }
    }
    flush_heading(&mut heading, md, first_heading);
    flush(&mut para, md);
}

/// Appends a line to a paragraph: a word hyphenated at the line end is joined, CJK lines
/// are joined without a space, others with one.
fn join_line(para: &mut String, line: &str) {
    if para.is_empty() {
        para.push_str(line);
        return;
    }
    let next = line.chars().next().unwrap_or(' ');
    let mut tail = para.chars().rev();
    let last = tail.next().unwrap_or(' ');
    let before = tail.next().unwrap_or(' ');
    if matches!(last, '-' | '\u{00ad}' | '\u{2010}')
        && before.is_alphabetic()
        && next.is_lowercase()
    {
        para.pop();
        para.push_str(line);
    } else if is_cjk(last) || is_cjk(next) {
        para.push_str(line);
    } else {
        para.push(' ');
        para.push_str(line);
    }
}

/// `catch_unwind` without the default hook's message for panics it catches: a page the
/// interpreter cannot handle is reported as unreadable, not as a crash on stderr.
mod quiet_panics {
    use std::cell::Cell;
    use std::sync::Once;

    thread_local! {
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if !QUIET.with(Cell::get) {
                    previous(info);
                }
            }));
        });
    }

    pub(super) fn run<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
        QUIET.with(|q| q.set(true));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        QUIET.with(|q| q.set(false));
        r.map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyphenated_words_are_joined_and_cjk_lines_meet_without_a_space() {
        let mut p = String::from("the retrie-");
        join_line(&mut p, "val system");
        assert_eq!(p, "the retrieval system");
        let mut p = String::from("well-");
        join_line(&mut p, "Known");
        assert_eq!(p, "well- Known", "a capital after the hyphen keeps it");
        let mut p = String::from("北风贸易公司。");
        join_line(&mut p, "上海仓库");
        assert_eq!(p, "北风贸易公司。上海仓库");
    }

    fn text(t: &str, size: f64, y: f64) -> Line {
        Line::Text {
            text: t.into(),
            size,
            y,
        }
    }

    #[test]
    fn a_heading_on_two_lines_is_one_and_a_large_paragraph_is_text() {
        let body = "Body text of the page goes on here for a while, line after line.";
        let mut lines = vec![
            text("A Long Report Title That", 20.0, 50.0),
            text("Wraps Onto Two Lines", 20.0, 72.0),
        ];
        // An introduction set larger than the body, for many lines: text, not headings.
        for i in 0..6 {
            lines.push(text(
                "An introduction in a larger font, line",
                13.0,
                110.0 + 16.0 * i as f64,
            ));
        }
        for i in 0..60 {
            lines.push(text(body, 10.0, 220.0 + 12.0 * i as f64));
        }
        let pages = vec![Page {
            number: 1,
            height: 1000.0,
            lines,
        }];
        let b = body_size(&pages);
        assert_eq!(b, 10.0);
        let levels = heading_levels(&pages, b);
        assert_eq!(levels, vec![40], "only the title's size: {levels:?}");
        let mut md = Md::new(Some(PlaceUnit::Page));
        let mut first = None;
        write_page(&pages[0], b, &levels, &HashMap::new(), &mut md, &mut first);
        let (out, _) = md.finish();
        assert!(
            out.starts_with("# A Long Report Title That Wraps Onto Two Lines\n\nAn introduction"),
            "{out}"
        );
        assert_eq!(
            first.as_deref(),
            Some("A Long Report Title That Wraps Onto Two Lines")
        );
    }

    #[test]
    fn bulleted_lines_are_list_items() {
        let page = Page {
            number: 1,
            height: 800.0,
            lines: vec![
                text("The types:", 10.0, 100.0),
                text("• UTF8String, which is", 10.0, 112.0),
                text("wrapped", 10.0, 124.0),
                text("• SEQUENCE", 10.0, 136.0),
            ],
        };
        let mut md = Md::new(None);
        let mut first = None;
        write_page(&page, 10.0, &[], &HashMap::new(), &mut md, &mut first);
        let (out, _) = md.finish();
        assert_eq!(
            out,
            "The types:\n\n- UTF8String, which is wrapped\n\n- SEQUENCE\n"
        );
    }

    #[test]
    fn running_lines_repeat_in_the_margins_of_most_pages() {
        let page = |n: u32| Page {
            number: n,
            height: 800.0,
            lines: vec![
                text("ACME Handbook", 8.0, 20.0),
                text(&format!("Body of page {n}"), 10.0, 400.0),
                text(&format!("- {n} -"), 8.0, 780.0),
            ],
        };
        let mut pages: Vec<Page> = (1..=4).map(page).collect();
        // A line in the margin of one page only stays.
        pages[2].lines.push(text("Draft", 8.0, 30.0));
        remove_running_lines(&mut pages);
        let left: Vec<Vec<String>> = pages
            .iter()
            .map(|p| {
                p.lines
                    .iter()
                    .filter_map(|l| match l {
                        Line::Text { text, .. } => Some(text.clone()),
                        Line::Table(_) => None,
                    })
                    .collect()
            })
            .collect();
        assert_eq!(left[0], vec!["Body of page 1"]);
        assert_eq!(left[2], vec!["Body of page 3", "Draft"]);
    }

    #[test]
    fn garbage_is_a_damaged_pdf() {
        let err = read_pdf(b"%PDF-1.7\nnot really".to_vec()).expect_err("refused");
        assert!(err.starts_with("damaged PDF"), "{err}");
    }

    // The inputs below once hung the reader or overflowed its stack, which aborts the
    // process (fuzz/regressions/pdf/, RELIABILITY.md).

    #[test]
    fn a_form_that_draws_itself_costs_only_its_page() {
        let pdf = include_bytes!("../../../../fuzz/regressions/pdf/form-draws-itself.pdf");
        let got = read_pdf(pdf.to_vec()).expect("the sound page is read");
        assert!(got.text.contains("bearing was replaced"), "{}", got.text);
        assert!(!got.text.contains("station 7"), "{}", got.text);
        assert_eq!(got.metadata["unreadable_pages"], serde_json::json!([1]));
        assert_eq!(
            got.metadata["unreadable_reasons"]["1"],
            "a form (5 0 R) draws itself"
        );
    }

    #[test]
    fn a_page_tree_that_loops_is_refused_with_the_reason() {
        let pdf = include_bytes!("../../../../fuzz/regressions/pdf/parent-loop.pdf");
        let err = read_pdf(pdf.to_vec()).expect_err("refused");
        assert_eq!(
            err,
            "damaged PDF: none of its 1 pages could be read (page 1: its page tree loops (a \
             Parent link leads back to itself))"
        );
    }

    #[test]
    fn an_outline_that_loops_is_no_outline() {
        let pdf = include_bytes!("../../../../fuzz/regressions/pdf/outline-loop.pdf");
        let got = read_pdf(pdf.to_vec()).expect("read without its outline");
        assert!(got.text.contains("The pump at station 7"), "{}", got.text);
    }

    /// A one-page PDF whose page draws form 1 of `forms`; form `i` draws the forms named
    /// in `calls(i)` (the last form writes the text).
    fn nested_forms(forms: usize, calls: impl Fn(usize) -> Vec<usize>) -> Vec<u8> {
        let stream = |dict: &str, body: &str| {
            format!(
                "<< {dict} /Length {} >>\nstream\n{body}\nendstream",
                body.len()
            )
        };
        let text = "BT /F1 12 Tf 72 712 Td (The pump at station 7) Tj ET\n";
        let xobjects = |named: &[usize]| {
            named
                .iter()
                .map(|i| format!("/X{i} {} 0 R", 5 + i))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut objects = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".into(),
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
                 /Resources << /Font << /F1 5 0 R >> /XObject << {} >> >> >>",
                xobjects(&[1])
            ),
            stream("", &format!("{text}/X1 Do")),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into(),
        ];
        for i in 1..=forms {
            let calls = calls(i);
            let body: String = calls.iter().map(|c| format!("/X{c} Do\n")).collect();
            let body = if body.is_empty() {
                text.to_string()
            } else {
                body
            };
            objects.push(stream(
                &format!(
                    "/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << \
                     /Font << /F1 5 0 R >> /XObject << {} >> >>",
                    xobjects(&calls)
                ),
                &body,
            ));
        }
        let mut out = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, o) in objects.iter().enumerate() {
            offsets.push(out.len());
            out.extend(format!("{} 0 obj\n{o}\nendobj\n", i + 1).bytes());
        }
        let xref = out.len();
        out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
        for o in offsets {
            out.extend(format!("{o:010} 00000 n \n").bytes());
        }
        out.extend(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .bytes(),
        );
        out
    }

    #[test]
    fn forms_nested_deeper_than_any_real_file_are_refused() {
        let shallow = nested_forms(loops::MAX_FORM_DEPTH, |i| {
            if i < loops::MAX_FORM_DEPTH {
                vec![i + 1]
            } else {
                vec![]
            }
        });
        let got = read_pdf(shallow).expect("as deep as allowed");
        assert!(got.text.contains("The pump at station 7"), "{}", got.text);

        // Thousands deep overflowed the stack before.
        let deep = nested_forms(3000, |i| if i < 3000 { vec![i + 1] } else { vec![] });
        let err = read_pdf(deep).expect_err("too deep");
        assert!(
            err.ends_with("(page 1: its forms nest more than 32 deep)"),
            "{err}"
        );
    }

    #[test]
    fn forms_that_each_draw_the_next_twice_are_refused() {
        // 2^30 drawings: no stack overflow, but a hang.
        let doubling = nested_forms(30, |i| if i < 30 { vec![i + 1, i + 1] } else { vec![] });
        let err = read_pdf(doubling).expect_err("too many drawings");
        assert!(
            err.ends_with("(page 1: it draws forms more than 10000 times)"),
            "{err}"
        );
    }
}
