//! HTML kept structured: parsed by html5ever (the browsers' HTML5 parsing algorithm, into
//! `markup5ever_rcdom`'s tree), then walked into Markdown-like text.
//!
//! Headings h1-h6 give the section path; paragraphs, lists, `pre` blocks and tables keep
//! their shape (tables as pipe tables: no box-drawing characters); images become figures with
//! their alt text, file name and `figcaption`. Boilerplate is dropped: `nav`, `aside`,
//! `footer`, a page-level `header` without a heading, forms, scripts and styles, and
//! elements whose ARIA role is navigation, banner, contentinfo or search.

use super::office::{El, Node};
use super::{Extracted, Md, one_line};
use markup5ever_rcdom::{Handle, NodeData, RcDom};

/// Reads an HTML page.
pub fn read_html(html: &str) -> Result<Extracted, String> {
    let dom = parse(html);
    let root = convert(&dom.document);
    let title = root
        .find("title")
        .map(|t| one_line(&all_text(t)))
        .filter(|t| !t.is_empty());
    let body = root.find("body").unwrap_or(&root);
    let mut w = Walker {
        md: Md::new(None),
        inline: String::new(),
        list_depth: 0,
        first_h1: None,
    };
    w.block(body);
    w.flush();
    let (text, layout) = w.md.finish();
    Ok(Extracted {
        title: title.or(w.first_h1),
        text,
        layout,
        metadata: Default::default(),
    })
}

/// The most elements the tree builder may hold open (its stack of open elements and its
/// list of active formatting elements together) before a start tag is dropped. Browsers
/// cap the depth too (Blink at 512). html5ever does not: each start tag scans the open
/// elements, so 20,000 nested `<div>`s took 43 s and a megabyte of them hours, and 200,000
/// nested `<b>`s overflowed the stack, which aborts the process (found by fuzzing,
/// RELIABILITY.md).
pub(crate) const MAX_HTML_DEPTH: usize = 512;

/// Parses a page as html5ever's `parse_document` does, through [`Capped`].
fn parse(html: &str) -> RcDom {
    use html5ever::TokenizerResult;
    use html5ever::tendril::StrTendril;
    use html5ever::tokenizer::{BufferQueue, Tokenizer};
    use html5ever::tree_builder::TreeBuilder;
    let builder = TreeBuilder::new(RcDom::default(), Default::default());
    let tokenizer = Tokenizer::new(Capped::new(builder), Default::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    // A script's end pauses the tokenizer (for a browser to run it); carry on.
    while let TokenizerResult::Script(_) = tokenizer.feed(&input) {}
    tokenizer.end();
    tokenizer.sink.builder.sink
}

/// Stands between html5ever's tokenizer and its tree builder and drops start tags (with
/// their end tags) while the builder holds [`MAX_HTML_DEPTH`] elements: the text inside
/// is kept, in the innermost element kept. Written here because html5ever has no such
/// limit.
struct Capped<B> {
    builder: B,
    /// Start tags dropped and not yet closed, by name.
    dropped: std::cell::RefCell<std::collections::HashMap<html5ever::LocalName, usize>>,
}

impl<B> Capped<B> {
    fn new(builder: B) -> Capped<B> {
        Capped {
            builder,
            dropped: Default::default(),
        }
    }
}

/// Counts the handles the tree builder holds.
struct Count(std::cell::Cell<usize>);

impl html5ever::tree_builder::Tracer for Count {
    type Handle = Handle;
    fn trace_handle(&self, _: &Handle) {
        self.0.set(self.0.get() + 1);
    }
}

impl html5ever::tokenizer::TokenSink
    for Capped<html5ever::tree_builder::TreeBuilder<Handle, RcDom>>
{
    type Handle = Handle;

    fn process_token(
        &self,
        token: html5ever::tokenizer::Token,
        line_number: u64,
    ) -> html5ever::tokenizer::TokenSinkResult<Handle> {
        use html5ever::tokenizer::{TagKind, Token, TokenSinkResult};
        if let Token::TagToken(tag) = &token {
            let mut dropped = self.dropped.borrow_mut();
            match tag.kind {
                TagKind::StartTag if !tag.self_closing && !opens_nothing(&tag.name) => {
                    let held = Count(std::cell::Cell::new(0));
                    self.builder.trace_handles(&held);
                    if held.0.get() >= MAX_HTML_DEPTH {
                        *dropped.entry(tag.name.clone()).or_default() += 1;
                        return TokenSinkResult::Continue;
                    }
                }
                TagKind::EndTag => {
                    if let Some(n) = dropped.get_mut(&tag.name).filter(|n| **n > 0) {
                        *n -= 1;
                        return TokenSinkResult::Continue;
                    }
                }
                TagKind::StartTag => {}
            }
        }
        self.builder.process_token(token, line_number)
    }

    fn end(&self) {
        self.builder.end()
    }

    fn adjusted_current_node_present_but_not_in_html_namespace(&self) -> bool {
        self.builder
            .adjusted_current_node_present_but_not_in_html_namespace()
    }
}

/// Start tags never dropped: void elements (they hold nothing open) and those whose
/// content the tokenizer reads as raw text (dropping one would turn a script into text).
fn opens_nothing(name: &str) -> bool {
    matches!(
        name,
        "area"
            | "base"
            | "br"
            | "col"
            | "embed"
            | "hr"
            | "img"
            | "input"
            | "link"
            | "meta"
            | "source"
            | "track"
            | "wbr"
            | "script"
            | "style"
            | "textarea"
            | "title"
            | "xmp"
            | "iframe"
            | "noembed"
            | "noframes"
            | "noscript"
            | "plaintext"
    )
}

/// The DOM as the shared element tree (elements and text; comments dropped).
fn convert(handle: &Handle) -> El {
    let mut el = El::default();
    if let NodeData::Element { name, attrs, .. } = &handle.data {
        el.name = name.local.to_string();
        el.attrs = attrs
            .borrow()
            .iter()
            .map(|a| (a.name.local.to_string(), a.value.to_string()))
            .collect();
    }
    for child in handle.children.borrow().iter() {
        match &child.data {
            NodeData::Element { .. } => el.children.push(Node::El(convert(child))),
            NodeData::Text { contents } => {
                el.children.push(Node::Text(contents.borrow().to_string()))
            }
            NodeData::Document => {
                el.children.extend(convert(child).children);
            }
            _ => {}
        }
    }
    el
}

/// Text of an element and everything below it.
fn all_text(el: &El) -> String {
    let mut s = String::new();
    fn walk(el: &El, s: &mut String) {
        for c in &el.children {
            match c {
                Node::Text(t) => s.push_str(t),
                Node::El(e) if e.name == "br" => s.push('\n'),
                Node::El(e) if is_dropped(e) => {}
                Node::El(e) => {
                    walk(e, s);
                    if is_block(&e.name) {
                        s.push(' ');
                    }
                }
            }
        }
    }
    walk(el, &mut s);
    s
}

fn is_dropped(e: &El) -> bool {
    let role = e.attr("role").unwrap_or("");
    matches!(
        e.name.as_str(),
        "script"
            | "style"
            | "noscript"
            | "template"
            | "nav"
            | "aside"
            | "footer"
            | "form"
            | "button"
            | "select"
            | "svg"
            | "iframe"
            | "head"
    ) || matches!(role, "navigation" | "banner" | "contentinfo" | "search")
        || e.attr("hidden").is_some()
        || e.attr("aria-hidden") == Some("true")
        || (e.name == "header" && !has_heading(e))
}

fn has_heading(e: &El) -> bool {
    e.elements()
        .any(|c| heading_level(&c.name).is_some() || has_heading(c))
}

fn heading_level(name: &str) -> Option<usize> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

fn is_block(name: &str) -> bool {
    matches!(
        name,
        "p" | "div"
            | "section"
            | "article"
            | "main"
            | "header"
            | "blockquote"
            | "ul"
            | "ol"
            | "li"
            | "dl"
            | "dt"
            | "dd"
            | "table"
            | "tr"
            | "td"
            | "th"
            | "figure"
            | "figcaption"
            | "pre"
            | "hr"
            | "address"
            | "details"
            | "summary"
            | "body"
            | "html"
    ) || heading_level(name).is_some()
}

struct Walker {
    md: Md,
    inline: String,
    list_depth: usize,
    first_h1: Option<String>,
}

impl Walker {
    fn flush(&mut self) {
        let text = std::mem::take(&mut self.inline);
        if !text.trim().is_empty() {
            self.md.para(&text);
        }
    }

    fn block(&mut self, el: &El) {
        for c in &el.children {
            match c {
                Node::Text(t) => self.inline.push_str(t),
                Node::El(e) => self.element(e),
            }
        }
    }

    fn element(&mut self, e: &El) {
        if is_dropped(e) {
            return;
        }
        let name = e.name.as_str();
        if let Some(level) = heading_level(name) {
            self.flush();
            let text = one_line(&all_text(e));
            if level == 1 && self.first_h1.is_none() && !text.is_empty() {
                self.first_h1 = Some(text.clone());
            }
            self.md.heading(level, &text);
            return;
        }
        match name {
            "br" => self.inline.push('\n'),
            "img" => {
                self.flush();
                self.image(e, None);
            }
            "figure" => {
                self.flush();
                let caption = e.find("figcaption").map(|c| one_line(&all_text(c)));
                match e.find("img") {
                    Some(img) => self.image(img, caption.as_deref()),
                    None => {
                        // A figure of something else (a table, code): its content, then the
                        // caption.
                        for c in e.elements().filter(|c| c.name != "figcaption") {
                            self.element(c);
                        }
                        self.flush();
                        if let Some(c) = caption {
                            self.md.para(&c);
                        }
                    }
                }
            }
            "table" => {
                self.flush();
                let mut rows = Vec::new();
                collect_rows(e, &mut rows);
                let caption = e.child("caption").map(|c| one_line(&all_text(c)));
                if let Some(c) = caption.filter(|c| !c.is_empty()) {
                    self.md.para(&c);
                }
                self.md.table(&rows);
            }
            "pre" => {
                self.flush();
                self.md.code(&all_text(e));
            }
            "ul" | "ol" => {
                self.flush();
                self.list_depth += 1;
                for li in e.elements() {
                    if li.name == "li" {
                        self.list_item(li);
                    } else {
                        self.element(li);
                    }
                }
                self.list_depth -= 1;
            }
            "li" => self.list_item(e),
            _ if is_block(name) => {
                self.flush();
                self.block(e);
                self.flush();
            }
            _ => self.block(e),
        }
    }

    /// A list item: its own text as an item, nested lists below it.
    fn list_item(&mut self, li: &El) {
        self.flush();
        let mut own = String::new();
        let mut nested = Vec::new();
        for c in &li.children {
            match c {
                Node::Text(t) => own.push_str(t),
                Node::El(e) if matches!(e.name.as_str(), "ul" | "ol") => nested.push(e),
                Node::El(e) if !is_dropped(e) => {
                    own.push_str(&all_text(e));
                    own.push(' ');
                }
                Node::El(_) => {}
            }
        }
        self.md.item(&own, self.list_depth.saturating_sub(1));
        for n in nested {
            self.element(n);
        }
    }

    fn image(&mut self, img: &El, caption: Option<&str>) {
        let alt = img.attr("alt").unwrap_or("");
        let src = img.attr("src").unwrap_or("");
        // The file name, not a data: URL or a long path.
        let file = if src.starts_with("data:") {
            ""
        } else {
            src.split(['?', '#'])
                .next()
                .unwrap_or("")
                .rsplit('/')
                .next()
                .unwrap_or("")
        };
        self.md.image(alt, file, caption);
    }
}

fn collect_rows(el: &El, rows: &mut Vec<Vec<String>>) {
    for c in el.elements() {
        match c.name.as_str() {
            "tr" => rows.push(
                c.elements()
                    .filter(|cell| cell.name == "td" || cell.name == "th")
                    .map(all_text)
                    .collect(),
            ),
            "thead" | "tbody" | "tfoot" => collect_rows(c, rows),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_keeps_headings_tables_and_figures_and_drops_boilerplate() {
        let html = r#"<html><head><title>Hobs</title><style>p{}</style></head><body>
<nav><a href="/">Home</a> <a href="/shop">Shop</a></nav>
<header><p>Portal banner</p></header>
<main><h1>Induction hobs</h1><p>Heats   in <b>ninety</b> seconds.</p>
<h2>Errors</h2>
<table><tr><th>Code</th><th>Meaning</th></tr><tr><td>E1</td><td>No pan</td></tr></table>
<ul><li>One<ul><li>Nested</li></ul></li><li>Two</li></ul>
<figure><img src="/img/zones.png?v=2" alt="Cooking zones"><figcaption>Figure 2: Zones.</figcaption></figure>
</main><footer>Copyright</footer><script>var x;</script></body></html>"#;
        let got = read_html(html).expect("reads");
        assert_eq!(got.title.as_deref(), Some("Hobs"));
        assert_eq!(
            got.text,
            "# Induction hobs\n\nHeats in ninety seconds.\n\n## Errors\n\n| Code | Meaning |\n|---|---|\n| E1 | No pan |\n\n- One\n  - Nested\n- Two\n\n![Cooking zones](zones.png)\nFigure 2: Zones.\n"
        );
        for gone in ["Home", "Portal banner", "Copyright", "var x", "─", "│"] {
            assert!(!got.text.contains(gone), "{gone:?} left in {:?}", got.text);
        }
    }

    #[test]
    fn elements_nested_past_the_cap_keep_their_text_and_the_page_goes_on() {
        // 20,000 nested divs took html5ever 43 s; the end tags of the dropped ones are
        // dropped too, so what follows is back at the body's level.
        let n = 20_000;
        let html = format!(
            "<html><body>{}<p>Deep text</p>{}<h2>After</h2><p>Tail <script>var x;</script></p>\
             </body></html>",
            "<div>".repeat(n),
            "</div>".repeat(n)
        );
        let got = read_html(&html).expect("reads");
        assert_eq!(got.text, "Deep text\n\n## After\n\nTail\n");

        // 100,000 nested bold tags, never closed, overflowed the stack.
        let html = format!(
            "<p>{}Bold<table><tr><td>cell</td></tr></table>",
            "<b>".repeat(100_000)
        );
        let got = read_html(&html).expect("reads");
        assert!(got.text.contains("Bold"), "{:?}", got.text);
        assert!(got.text.contains("cell"), "{:?}", got.text);

        // Below the cap nothing is dropped.
        let html = format!(
            "{}<h3>Kept</h3>{}",
            "<section>".repeat(MAX_HTML_DEPTH - 10),
            "</section>".repeat(MAX_HTML_DEPTH - 10)
        );
        assert_eq!(read_html(&html).expect("reads").text, "### Kept\n");
    }
}
