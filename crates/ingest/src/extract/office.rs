//! DOCX and PPTX: Office Open XML packages (a zip of XML parts), read with `zip` and
//! `quick-xml`.
//!
//! - DOCX: paragraphs in body order; heading styles (`Title`, `Heading 1`-`6`, or an outline
//!   level) become headings; list paragraphs list items; tables pipe tables; pictures their
//!   alt text (`wp:docPr descr`, else its title or name) and media file name, with the
//!   caption paragraph that follows.
//! - PPTX: slides in presentation order, each a section (`# title`) on its own slide number;
//!   text boxes in shape order, tables, pictures (alt text, file), then the speaker notes.
//! - ODT (OpenDocument text, the same zip-of-XML shape): headings by outline level, lists,
//!   tables, frames with images (their title or description, file name).
//!
//! A zip bomb costs nothing: every part is read through a cap (64 MiB each, 256 MiB in all),
//! and a part that claims more, or inflates past the cap, stops the file with that reason.

use super::{Extracted, Md};
use situate_core::PlaceUnit;
use std::collections::HashMap;
use std::io::Read;

/// Largest unpacked XML part read.
const PART_LIMIT: u64 = 64 << 20;
/// Largest total unpacked per file.
const TOTAL_LIMIT: u64 = 256 << 20;

/// An element of a parsed XML part: its local name, attributes (qualified names, as
/// written), and children. XML parts of Office files are small enough (a cap above) to
/// hold as a tree, which keeps each reader a plain walk.
#[derive(Debug, Default)]
pub(crate) struct El {
    pub(crate) name: String,
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) children: Vec<Node>,
}

#[derive(Debug)]
pub(crate) enum Node {
    El(El),
    Text(String),
}

impl El {
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name || k.rsplit(':').next() == Some(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn elements(&self) -> impl Iterator<Item = &El> {
        self.children.iter().filter_map(|c| match c {
            Node::El(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    pub(crate) fn child(&self, name: &str) -> Option<&El> {
        self.elements().find(|e| e.name == name)
    }

    /// Every descendant named `name`, in document order.
    pub(crate) fn find_all<'a>(&'a self, name: &str, out: &mut Vec<&'a El>) {
        for e in self.elements() {
            if e.name == name {
                out.push(e);
            } else {
                e.find_all(name, out);
            }
        }
    }

    pub(crate) fn find(&self, name: &str) -> Option<&El> {
        let mut v = Vec::new();
        self.find_all(name, &mut v);
        v.into_iter().next()
    }

    /// The text of `t` elements below (DrawingML and WordprocessingML both keep text in
    /// `t`), with tabs and breaks as spaces and line breaks.
    pub(crate) fn text(&self) -> String {
        let mut s = String::new();
        self.text_into(&mut s);
        s
    }

    fn text_into(&self, s: &mut String) {
        for c in &self.children {
            match c {
                Node::Text(t) if self.name == "t" => s.push_str(t),
                Node::Text(_) => {}
                Node::El(e) => match e.name.as_str() {
                    "tab" => s.push(' '),
                    "br" | "cr" => s.push('\n'),
                    // Deleted text of tracked changes and field codes are not content.
                    "delText" | "instrText" => {}
                    _ => e.text_into(s),
                },
            }
        }
    }
}

/// Parses an XML part into its root element.
pub(crate) fn parse_xml(xml: &str) -> Result<El, String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<El> = vec![El::default()];
    let open = |e: &quick_xml::events::BytesStart<'_>| -> Result<El, String> {
        let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
        let mut attrs = Vec::new();
        for a in e.attributes() {
            let a = a.map_err(|e| e.to_string())?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a.unescape_value().map_err(|e| e.to_string())?.into_owned();
            attrs.push((key, value));
        }
        Ok(El {
            name,
            attrs,
            children: Vec::new(),
        })
    };
    let push_text = |stack: &mut Vec<El>, t: &str| {
        if let Some(top) = stack.last_mut() {
            match top.children.last_mut() {
                Some(Node::Text(s)) => s.push_str(t),
                _ => top.children.push(Node::Text(t.to_string())),
            }
        }
    };
    loop {
        match reader
            .read_event()
            .map_err(|e| format!("damaged XML: {e}"))?
        {
            Event::Start(e) => stack.push(open(&e)?),
            Event::Empty(e) => {
                let el = open(&e)?;
                if let Some(top) = stack.last_mut() {
                    top.children.push(Node::El(el));
                }
            }
            Event::End(_) => {
                let el = stack.pop().ok_or("damaged XML: unbalanced tags")?;
                match stack.last_mut() {
                    Some(top) => top.children.push(Node::El(el)),
                    None => return Err("damaged XML: unbalanced tags".into()),
                }
            }
            Event::Text(t) => {
                let t = t.decode().map_err(|e| format!("damaged XML: {e}"))?;
                push_text(&mut stack, &t);
            }
            Event::CData(t) => {
                let t = t.decode().map_err(|e| format!("damaged XML: {e}"))?;
                push_text(&mut stack, &t);
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => {
                        let name = r.decode().map_err(|e| format!("damaged XML: {e}"))?;
                        quick_xml::escape::resolve_predefined_entity(&name)
                            .unwrap_or("")
                            .to_string()
                    }
                };
                push_text(&mut stack, &resolved);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let root = stack.pop().ok_or("damaged XML: empty")?;
    if !stack.is_empty() {
        return Err("damaged XML: unclosed tags".into());
    }
    root.children
        .into_iter()
        .find_map(|c| match c {
            Node::El(e) => Some(e),
            Node::Text(_) => None,
        })
        .ok_or_else(|| "damaged XML: no root element".into())
}

/// An Office package: a zip read part by part under the caps.
pub(crate) struct Package {
    zip: zip::ZipArchive<std::io::Cursor<Vec<u8>>>,
    read_total: u64,
    what: &'static str,
}

impl Package {
    pub(crate) fn open(bytes: Vec<u8>, what: &'static str) -> Result<Package, String> {
        let zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
            .map_err(|e| format!("not a {what} file (not a zip package: {e})"))?;
        Ok(Package {
            zip,
            read_total: 0,
            what,
        })
    }

    /// A part's text, `None` when the package has no such part.
    pub(crate) fn part(&mut self, name: &str) -> Result<Option<String>, String> {
        let what = self.what;
        let mut f = match self.zip.by_name(name) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err(format!("damaged {what} file: {name}: {e}")),
        };
        if f.size() > PART_LIMIT {
            return Err(format!(
                "{name} unpacks to {} bytes (limit {PART_LIMIT}): a zip bomb or a damaged {what} file",
                f.size()
            ));
        }
        let mut bytes = Vec::new();
        (&mut f)
            .take(PART_LIMIT + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("damaged {what} file: {name}: {e}"))?;
        if bytes.len() as u64 > PART_LIMIT {
            return Err(format!(
                "{name} unpacks past {PART_LIMIT} bytes: a zip bomb or a damaged {what} file"
            ));
        }
        self.read_total += bytes.len() as u64;
        if self.read_total > TOTAL_LIMIT {
            return Err(format!(
                "the parts unpack past {TOTAL_LIMIT} bytes: a zip bomb or a damaged {what} file"
            ));
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| format!("damaged {what} file: {name} is not UTF-8 XML"))
    }

    fn xml(&mut self, name: &str) -> Result<Option<El>, String> {
        match self.part(name)? {
            None => Ok(None),
            Some(t) => parse_xml(&t).map(Some).map_err(|e| format!("{name}: {e}")),
        }
    }

    /// The relationships of a part: id → target path (resolved against the part's folder).
    fn rels(&mut self, part: &str) -> Result<HashMap<String, String>, String> {
        let (dir, file) = part.rsplit_once('/').unwrap_or(("", part));
        let rels_name = if dir.is_empty() {
            format!("_rels/{file}.rels")
        } else {
            format!("{dir}/_rels/{file}.rels")
        };
        let mut out = HashMap::new();
        if let Some(root) = self.xml(&rels_name)? {
            for r in root.elements().filter(|e| e.name == "Relationship") {
                if let (Some(id), Some(target)) = (r.attr("Id"), r.attr("Target")) {
                    out.insert(id.to_string(), resolve(dir, target));
                }
            }
        }
        Ok(out)
    }

    /// `docProps/core.xml`'s title.
    fn title(&mut self) -> Result<Option<String>, String> {
        Ok(self
            .xml("docProps/core.xml")?
            .and_then(|r| r.child("title").map(El::text))
            .map(|t| super::one_line(&t))
            .filter(|t| !t.is_empty()))
    }
}

/// A relationship target against its part's folder (`../media/a.png` from `ppt/slides`).
fn resolve(dir: &str, target: &str) -> String {
    if let Some(abs) = target.strip_prefix('/') {
        return abs.to_string();
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for seg in target.split('/') {
        match seg {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            s => parts.push(s),
        }
    }
    parts.join("/")
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A picture's description: alt text, else its title, else its name (when not the
/// generator's "Picture 3").
fn alt_of(props: Option<&El>) -> String {
    let Some(p) = props else {
        return String::new();
    };
    for key in ["descr", "title"] {
        if let Some(v) = p.attr(key).filter(|v| !v.trim().is_empty()) {
            return v.to_string();
        }
    }
    p.attr("name")
        .filter(|n| {
            let generic = ["Picture", "Image", "Рисунок", "图片", "Graphic"];
            !generic.iter().any(|g| n.starts_with(g))
        })
        .unwrap_or("")
        .to_string()
}

/// A picture (a DOCX drawing, a PPTX `pic`): its description from the `props` element
/// (`docPr`, `cNvPr`) and the file name of the media its blip embeds.
fn picture(shape: &El, props: &str, rels: &HashMap<String, String>, md: &mut Md) {
    let alt = alt_of(shape.find(props));
    let file = shape
        .find("blip")
        .and_then(|b| b.attr("r:embed"))
        .and_then(|id| rels.get(id))
        .map(|t| file_name(t).to_string())
        .unwrap_or_default();
    md.image(&alt, &file, None);
}

/// Reads a DOCX file.
pub fn read_docx(bytes: Vec<u8>) -> Result<Extracted, String> {
    let mut pkg = Package::open(bytes, "DOCX")?;
    let doc = pkg
        .xml("word/document.xml")?
        .ok_or("not a DOCX file: the package has no word/document.xml")?;
    let rels = pkg.rels("word/document.xml")?;
    let styles = docx_styles(&mut pkg)?;
    let title = pkg.title()?;
    let body = doc
        .child("body")
        .ok_or("damaged DOCX file: no document body")?;
    let mut md = Md::new(None);
    let mut first_heading = None;
    docx_blocks(body, &styles, &rels, &mut md, &mut first_heading);
    let (text, layout) = md.finish();
    Ok(Extracted {
        text,
        title: title.or(first_heading),
        layout,
        metadata: Default::default(),
    })
}

/// What a paragraph style means here.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Style {
    Heading(usize),
    List,
    Caption,
    Plain,
}

/// styleId → meaning, from `word/styles.xml` (names are stable English ids even in localized
/// Word: `heading 1`, `Title`, `List Bullet`, `caption`), with outline levels.
fn docx_styles(pkg: &mut Package) -> Result<HashMap<String, Style>, String> {
    let mut out = HashMap::new();
    let Some(root) = pkg.xml("word/styles.xml")? else {
        return Ok(out);
    };
    for s in root.elements().filter(|e| e.name == "style") {
        let Some(id) = s.attr("styleId") else {
            continue;
        };
        let name = s
            .child("name")
            .and_then(|n| n.attr("val"))
            .unwrap_or(id)
            .to_lowercase();
        let outline = s
            .child("pPr")
            .and_then(|p| p.child("outlineLvl"))
            .and_then(|o| o.attr("val"))
            .and_then(|v| v.parse::<usize>().ok());
        let style = if name == "title" {
            Style::Heading(1)
        } else if let Some(n) = name
            .strip_prefix("heading ")
            .and_then(|n| n.trim().parse::<usize>().ok())
        {
            Style::Heading(n + 1)
        } else if let Some(level) = outline.filter(|l| *l < 9) {
            Style::Heading(level + 2)
        } else if name.starts_with("list") {
            Style::List
        } else if name == "caption" {
            Style::Caption
        } else {
            Style::Plain
        };
        out.insert(id.to_string(), style);
    }
    Ok(out)
}

fn docx_blocks(
    parent: &El,
    styles: &HashMap<String, Style>,
    rels: &HashMap<String, String>,
    md: &mut Md,
    first_heading: &mut Option<String>,
) {
    for el in parent.elements() {
        match el.name.as_str() {
            "p" => docx_paragraph(el, styles, rels, md, first_heading),
            "tbl" => {
                let rows: Vec<Vec<String>> = el
                    .elements()
                    .filter(|r| r.name == "tr")
                    .map(|r| {
                        r.elements()
                            .filter(|c| c.name == "tc")
                            .map(|c| {
                                c.elements()
                                    .filter(|p| p.name == "p")
                                    .map(El::text)
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            })
                            .collect()
                    })
                    .collect();
                md.table(&rows);
            }
            // Content controls and tracked insertions hold paragraphs too.
            "sdt" | "sdtContent" | "ins" | "customXml" => {
                docx_blocks(el, styles, rels, md, first_heading)
            }
            _ => {}
        }
    }
}

fn docx_paragraph(
    p: &El,
    styles: &HashMap<String, Style>,
    rels: &HashMap<String, String>,
    md: &mut Md,
    first_heading: &mut Option<String>,
) {
    let ppr = p.child("pPr");
    let style = ppr
        .and_then(|pp| pp.child("pStyle"))
        .and_then(|s| s.attr("val"))
        .and_then(|id| styles.get(id).copied())
        .unwrap_or(Style::Plain);
    let numbered = ppr.and_then(|pp| pp.child("numPr"));
    let depth = numbered
        .and_then(|n| n.child("ilvl"))
        .and_then(|l| l.attr("val"))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    // Pictures in the paragraph.
    let mut drawings = Vec::new();
    p.find_all("drawing", &mut drawings);
    for d in &drawings {
        picture(d, "docPr", rels, md);
    }
    let text = p.text();
    if text.trim().is_empty() {
        return;
    }
    match style {
        Style::Heading(level) => {
            if first_heading.is_none() {
                *first_heading = Some(super::one_line(&text));
            }
            md.heading(level, &text);
        }
        _ if numbered.is_some() || style == Style::List => md.item(&text, depth),
        _ => md.para(&text),
    }
}

// Long: each slide in order, its shapes' text, tables and speaker notes, in one reading
// of the package's parts.
/// Reads a PPTX file.
pub fn read_pptx(bytes: Vec<u8>) -> Result<Extracted, String> {
    let mut pkg = Package::open(bytes, "PPTX")?;
    let pres = pkg
        .xml("ppt/presentation.xml")?
        .ok_or("not a PPTX file: the package has no ppt/presentation.xml")?;
    let rels = pkg.rels("ppt/presentation.xml")?;
    let title = pkg.title()?;
    let mut ids = Vec::new();
    pres.find_all("sldId", &mut ids);
    let slides: Vec<String> = ids
        .iter()
        .filter_map(|s| s.attr("r:id").and_then(|id| rels.get(id)).cloned())
        .collect();
    let mut md = Md::new(Some(PlaceUnit::Slide));
    for (i, part) in slides.iter().enumerate() {
        let n = i as u32 + 1;
        let Some(slide) = pkg.xml(part)? else {
            continue;
        };
        let slide_rels = pkg.rels(part)?;
        md.unit(n);
        let tree = slide.find("spTree");
        let mut slide_title = None;
        if let Some(tree) = tree {
            let mut shapes = Vec::new();
            pptx_shapes(tree, &mut shapes);
            for s in &shapes {
                if s.name == "sp" && placeholder(s).is_some_and(|t| t == "title" || t == "ctrTitle")
                {
                    slide_title = Some(super::one_line(&s.text()));
                }
            }
            md.heading(
                1,
                &match slide_title.as_deref().filter(|t| !t.is_empty()) {
                    Some(t) => format!("Slide {n}: {t}"),
                    None => format!("Slide {n}"),
                },
            );
            for s in &shapes {
                match s.name.as_str() {
                    "sp" => {
                        if placeholder(s).is_some_and(|t| {
                            matches!(t, "title" | "ctrTitle" | "sldNum" | "dt" | "ftr")
                        }) {
                            continue;
                        }
                        let mut paras = Vec::new();
                        if let Some(body) = s.child("txBody") {
                            paras.extend(body.elements().filter(|p| p.name == "p"));
                        }
                        let bulleted = placeholder(s).is_some_and(|t| t == "body" || t == "obj");
                        for p in paras {
                            let text = p.text();
                            let depth = p
                                .child("pPr")
                                .and_then(|pp| pp.attr("lvl"))
                                .and_then(|v| v.parse::<usize>().ok())
                                .unwrap_or(0);
                            if bulleted {
                                md.item(&text, depth);
                            } else {
                                md.para(&text);
                            }
                        }
                    }
                    "pic" => picture(s, "cNvPr", &slide_rels, &mut md),
                    "graphicFrame" => {
                        if let Some(tbl) = s.find("tbl") {
                            let rows: Vec<Vec<String>> = tbl
                                .elements()
                                .filter(|r| r.name == "tr")
                                .map(|r| {
                                    r.elements()
                                        .filter(|c| c.name == "tc")
                                        .map(|c| c.text())
                                        .collect()
                                })
                                .collect();
                            md.table(&rows);
                        }
                    }
                    _ => {}
                }
            }
        }
        // Speaker notes: the notes slide's body placeholder.
        let notes_part = slide_rels
            .values()
            .find(|t| t.contains("notesSlides/"))
            .cloned();
        if let Some(notes_part) = notes_part
            && let Some(notes) = pkg.xml(&notes_part)?
        {
            let mut shapes = Vec::new();
            notes.find_all("sp", &mut shapes);
            let text: Vec<String> = shapes
                .iter()
                .filter(|s| placeholder(s) == Some("body"))
                .map(|s| super::one_line(&s.text()))
                .filter(|t| !t.is_empty())
                .collect();
            if !text.is_empty() {
                md.para(&format!("Notes: {}", text.join(" ")));
            }
        }
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert("slides".into(), slides.len().into());
    let (text, layout) = md.finish();
    Ok(Extracted {
        text,
        title,
        layout,
        metadata,
    })
}

/// Reads an ODT file.
pub fn read_odt(bytes: Vec<u8>) -> Result<Extracted, String> {
    let mut pkg = Package::open(bytes, "ODT")?;
    let content = pkg
        .xml("content.xml")?
        .ok_or("not an ODT file: the package has no content.xml")?;
    let title = pkg
        .xml("meta.xml")?
        .and_then(|m| m.find("title").map(odf_text))
        .map(|t| super::one_line(&t))
        .filter(|t| !t.is_empty());
    let body = content
        .child("body")
        .and_then(|b| b.child("text"))
        .ok_or("damaged ODT file: no text body")?;
    let mut md = Md::new(None);
    let mut first_heading = None;
    odt_blocks(body, 0, &mut md, &mut first_heading);
    let (text, layout) = md.finish();
    Ok(Extracted {
        text,
        title: title.or(first_heading),
        layout,
        metadata: Default::default(),
    })
}

fn odt_blocks(parent: &El, list_depth: usize, md: &mut Md, first_heading: &mut Option<String>) {
    for el in parent.elements() {
        match el.name.as_str() {
            "h" => {
                let level = el
                    .attr("outline-level")
                    .and_then(|l| l.parse::<usize>().ok())
                    .unwrap_or(1);
                let text = odf_text(el);
                if first_heading.is_none() && !text.trim().is_empty() {
                    *first_heading = Some(super::one_line(&text));
                }
                md.heading(level, &text);
            }
            "p" => {
                let mut frames = Vec::new();
                el.find_all("frame", &mut frames);
                let text = odf_text(el);
                if frames.is_empty() {
                    md.para(&text);
                    continue;
                }
                // A paragraph holding an image: the image, its own text as the caption.
                for f in frames {
                    let alt = ["desc", "title"]
                        .iter()
                        .filter_map(|n| f.child(n).map(odf_text))
                        .find(|t| !t.trim().is_empty())
                        .unwrap_or_default();
                    let file = f
                        .find("image")
                        .and_then(|i| i.attr("xlink:href"))
                        .map(|h| file_name(h).to_string())
                        .unwrap_or_default();
                    let caption = super::one_line(&text);
                    md.image(
                        &alt,
                        &file,
                        (!caption.is_empty()).then_some(caption.as_str()),
                    );
                }
            }
            "list" => odt_list(el, list_depth, md),
            "table" => {
                let mut rows_el = Vec::new();
                el.find_all("table-row", &mut rows_el);
                let rows: Vec<Vec<String>> = rows_el
                    .iter()
                    .map(|r| {
                        r.elements()
                            .filter(|c| c.name == "table-cell")
                            .map(odf_text)
                            .collect()
                    })
                    .collect();
                md.table(&rows);
            }
            "section" | "index-body" => odt_blocks(el, list_depth, md, first_heading),
            _ => {}
        }
    }
}

/// An OpenDocument list: each item's paragraphs as items, nested lists one level deeper.
fn odt_list(list: &El, depth: usize, md: &mut Md) {
    for item in list.elements().filter(|i| i.name == "list-item") {
        for c in item.elements() {
            match c.name.as_str() {
                "list" => odt_list(c, depth + 1, md),
                "p" | "h" => md.item(&odf_text(c), depth),
                _ => {}
            }
        }
    }
}

/// Text of an OpenDocument element: text nodes, `text:s` as spaces, tabs and line breaks,
/// frames (images) and notes left out.
fn odf_text(el: &El) -> String {
    let mut s = String::new();
    fn walk(el: &El, s: &mut String) {
        for c in &el.children {
            match c {
                Node::Text(t) => s.push_str(t),
                Node::El(e) => match e.name.as_str() {
                    "s" => {
                        let n = e.attr("c").and_then(|c| c.parse().ok()).unwrap_or(1usize);
                        s.push_str(&" ".repeat(n.min(100)));
                    }
                    "tab" => s.push(' '),
                    "line-break" => s.push('\n'),
                    "frame" | "note" | "annotation" => {}
                    _ => {
                        walk(e, s);
                        if e.name == "p" || e.name == "h" {
                            s.push(' ');
                        }
                    }
                },
            }
        }
    }
    walk(el, &mut s);
    s
}

/// Shapes of a slide in drawing order, groups opened.
fn pptx_shapes<'a>(tree: &'a El, out: &mut Vec<&'a El>) {
    for e in tree.elements() {
        match e.name.as_str() {
            "sp" | "pic" | "graphicFrame" => out.push(e),
            "grpSp" => pptx_shapes(e, out),
            _ => {}
        }
    }
}

/// A shape's placeholder type (`title`, `body`, ...; a placeholder without a type is a
/// body).
fn placeholder(shape: &El) -> Option<&str> {
    let ph = shape.find("ph")?;
    Some(ph.attr("type").unwrap_or("body"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_entities_and_character_references_are_resolved() {
        let root =
            parse_xml(r#"<a x="1 &amp; 2"><t>R&amp;D &#8212; &lt;ok&gt;</t></a>"#).expect("parses");
        assert_eq!(root.attr("x"), Some("1 & 2"));
        assert_eq!(root.text(), "R&D — <ok>");
        assert!(parse_xml("<a><b></a>").is_err());
    }

    #[test]
    fn relationship_targets_resolve_against_their_folder() {
        assert_eq!(resolve("ppt/slides", "../media/a.png"), "ppt/media/a.png");
        assert_eq!(resolve("word", "media/image1.png"), "word/media/image1.png");
        assert_eq!(resolve("ppt", "/ppt/slides/s1.xml"), "ppt/slides/s1.xml");
    }

    #[test]
    fn a_file_that_is_not_a_zip_says_so() {
        let err = read_docx(b"plain text".to_vec()).expect_err("refused");
        assert!(err.contains("not a zip"), "{err}");
    }
}
