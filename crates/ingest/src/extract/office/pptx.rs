//! PPTX: slides in presentation order, each a section on its own slide number; text boxes
//! in shape order, tables, pictures, then the speaker notes.

use super::*;
use crate::extract::Extracted;
use situate_core::PlaceUnit;

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
                    slide_title = Some(crate::extract::one_line(&s.text()));
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
                .map(|s| crate::extract::one_line(&s.text()))
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
