//! DOCX: paragraphs in body order, headings by style or outline level, lists, tables,
//! pictures with their captions.

use super::*;
use crate::extract::Extracted;

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
                *first_heading = Some(crate::extract::one_line(&text));
            }
            md.heading(level, &text);
        }
        _ if numbered.is_some() || style == Style::List => md.item(&text, depth),
        _ => md.para(&text),
    }
}

// Long: each slide in order, its shapes' text, tables and speaker notes, in one reading
// of the package's parts.
