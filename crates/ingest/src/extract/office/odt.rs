//! ODT (OpenDocument text): headings by outline level, lists, tables, frames with images.

use super::*;
use crate::extract::Extracted;

/// Reads an ODT file.
pub fn read_odt(bytes: Vec<u8>) -> Result<Extracted, String> {
    let mut pkg = Package::open(bytes, "ODT")?;
    let content = pkg
        .xml("content.xml")?
        .ok_or("not an ODT file: the package has no content.xml")?;
    let title = pkg
        .xml("meta.xml")?
        .and_then(|m| m.find("title").map(odf_text))
        .map(|t| crate::extract::one_line(&t))
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
                    *first_heading = Some(crate::extract::one_line(&text));
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
                    let caption = crate::extract::one_line(&text);
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
