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

mod docx;
mod odt;
mod pptx;

pub use docx::read_docx;
pub use odt::read_odt;
pub use pptx::read_pptx;

use super::Md;
use std::collections::HashMap;
use std::io::Read;

/// Largest unpacked XML part read.
const PART_LIMIT: u64 = 64 << 20;
/// Largest total unpacked per file.
const TOTAL_LIMIT: u64 = 256 << 20;
/// Deepest element nesting an XML part may have. Office files nest a few dozen levels
/// (tables in tables, groups of shapes); the tree's walks and its drop recurse once per
/// level, so a part nested 100,000 deep overflowed the stack, which aborts the process
/// (found by fuzzing, RELIABILITY.md).
pub(crate) const MAX_XML_DEPTH: usize = 256;

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

/// The text of an XML part, as the readers walk it: the one XML parser every Office reader
/// goes through, callable on its own (the `office_xml` fuzz target).
pub fn xml_text(xml: &str) -> Result<String, String> {
    let root = parse_xml(xml)?;
    let mut s = String::new();
    root.text_into(&mut s);
    Ok(s)
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
            Event::Start(e) => {
                // The stack holds the document node below the root element.
                if stack.len() > MAX_XML_DEPTH {
                    return Err(format!(
                        "damaged XML: elements nested more than {MAX_XML_DEPTH} deep"
                    ));
                }
                stack.push(open(&e)?)
            }
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
    fn xml_nested_deeper_than_any_office_file_is_refused() {
        let nested = |depth: usize| {
            let (open, close) = ("<a>".repeat(depth - 1), "</a>".repeat(depth - 1));
            format!("{open}<t>x</t>{close}")
        };
        assert_eq!(xml_text(&nested(MAX_XML_DEPTH)).as_deref(), Ok("x"));
        // 100,000 deep overflowed the stack before.
        assert_eq!(
            xml_text(&nested(100_000)),
            Err(format!(
                "damaged XML: elements nested more than {MAX_XML_DEPTH} deep"
            ))
        );
    }

    #[test]
    fn a_file_that_is_not_a_zip_says_so() {
        let err = read_docx(b"plain text".to_vec()).expect_err("refused");
        assert!(err.contains("not a zip"), "{err}");
    }
}
