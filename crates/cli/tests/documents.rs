//! Real documents: PDF, DOCX, PPTX and HTML files the test generates
//! (`tests/python/make_documents.py`, with fpdf2, python-docx and python-pptx), ingested
//! with their structure: pages and slides on every card, figure and table cards with
//! their contexts, running headers and footers gone, and every bad file skipped with its
//! reason while the rest is ingested.

use crate::{json, run, situate, skip_reason, test_python};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Generates the fixtures into `dir`: `dir/docs/...` and `dir/truth.json`.
fn make_documents(dir: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/make_documents.py");
    let out = std::process::Command::new(test_python())
        .arg(&script)
        .arg(dir)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "make_documents.py failed (scripts/test.sh installs fpdf2, python-docx, python-pptx, pypdf; \
         .ci/run the fonts-wqy-microhei package):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth = std::fs::read_to_string(dir.join("truth.json")).expect("truth.json");
    serde_json::from_str(&truth).expect("truth is JSON")
}

/// Every card of a document, by `situate show`, in order.
fn cards(index: &Path, document: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0.. {
        let o = situate(index)
            .args(["show", &format!("{document}#{i}"), "--json"])
            .output()
            .expect("runs");
        if !o.status.success() {
            break;
        }
        out.push(serde_json::from_slice(&o.stdout).expect("json"));
    }
    assert!(!out.is_empty(), "no cards of {document}");
    out
}

fn place(card: &Value) -> Option<(String, u64, u64)> {
    let p = card.get("place")?;
    Some((
        p["unit"].as_str()?.to_string(),
        p["first"].as_u64()?,
        p["last"].as_u64()?,
    ))
}

fn ingest(dir: &Path, max_tokens: &str) -> (PathBuf, Value) {
    let index = dir.join(format!("idx-{max_tokens}"));
    let v = json(
        situate(&index).arg("ingest").arg(dir.join("docs")).args([
            "--embedder",
            "none",
            "--max-tokens",
            max_tokens,
            "--overlap",
            "0",
        ]),
        0,
    );
    (index, v)
}

#[test]
fn pdf_docx_pptx_and_html_keep_structure_pages_figures_and_tables() {
    let tmp = tempfile::tempdir().expect("tmp");
    let truth = make_documents(tmp.path());
    let (index, v) = ingest(tmp.path(), "40");
    assert_eq!(v["report"]["added"], 8, "{v:#}");

    // Bad files: each skipped with its reason, the rest ingested.
    let skipped = v["report"]["skipped"].as_array().expect("skipped");
    let reason = |name: &str| skip_reason(&v, name);
    assert!(reason("encrypted.pdf").starts_with("encrypted PDF"));
    assert!(reason("scan.pdf").starts_with("no text layer"));
    assert!(reason("truncated.pdf").starts_with("damaged PDF"));
    assert!(reason("notzip.docx").contains("not a zip"));
    assert!(
        reason("bomb.docx").contains("zip bomb"),
        "{}",
        reason("bomb.docx")
    );
    assert_eq!(skipped.len(), 5, "{skipped:#?}");
    // A page the interpreter cannot read costs only itself, and says so.
    let one_bad = cards(&index, "docs/bad/onebadpage.pdf");
    assert_eq!(
        one_bad[0]["document"]["metadata"]["unreadable_pages"],
        serde_json::json!([2])
    );
    let rest: String = one_bad
        .iter()
        .filter_map(|c| c["original_text"].as_str())
        .collect();
    assert!(
        rest.contains("Казани") && !rest.contains("Revenue grew"),
        "{rest}"
    );

    // PDF: every line the generator put on page N is in a card whose place covers N.
    let pdf = cards(&index, "docs/report.pdf");
    // Compared without table rules and line breaks.
    let plain = |t: &str| {
        t.replace('|', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    for page in truth["report.pdf"]["pages"].as_array().expect("pages") {
        let n = page["page"].as_u64().expect("n");
        for line in page["text"].as_str().expect("text").lines() {
            let probe: String = plain(line).chars().take(24).collect();
            let card = pdf
                .iter()
                .find(|c| {
                    c["original_text"]
                        .as_str()
                        .is_some_and(|t| plain(t).contains(&probe))
                })
                .unwrap_or_else(|| panic!("{probe:?} (page {n}) is in no card: {pdf:#?}"));
            let (unit, first, last) = place(card).expect("a PDF card has a place");
            assert_eq!(unit, "page");
            assert!(
                (first..=last).contains(&n),
                "{probe:?} was put on page {n}, its card says {first}-{last}"
            );
        }
    }
    // Running header and footer are gone; the hyphenated word is whole; the two columns
    // are read one after the other; headings give the section path.
    let all: String = pdf
        .iter()
        .map(|c| c["original_text"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!all.contains("Northwind Annual Report 2025"), "{all}");
    assert!(!all.contains("Page 2 of 4"), "{all}");
    assert!(
        all.contains("retrieval system") && !all.contains("retrie-"),
        "{all}"
    );
    assert!(
        all.contains("Revenue grew 3% in the third quarter, to 812 million euros"),
        "left column read as one: {all}"
    );
    let figure = pdf
        .iter()
        .find(|c| c["kind"] == "image")
        .expect("a figure card");
    assert!(
        figure["original_text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Figure 1: Quarterly revenue")),
        "{figure:#}"
    );
    assert_eq!(place(figure), Some(("page".into(), 2, 2)));
    let context = figure["generated_context"].as_str().expect("a context");
    assert!(
        context.contains("2 Revenue") && context.contains("As Figure 1 shows"),
        "the figure's context says where it sits and what refers to it: {context}"
    );
    // The table (cut into pieces at this chunk size): each piece starts with the header.
    let tables: Vec<&Value> = pdf.iter().filter(|c| c["kind"] == "table").collect();
    assert!(!tables.is_empty());
    for t in &tables {
        assert!(
            t["original_text"]
                .as_str()
                .is_some_and(|t| t.starts_with("| Region | Q3 revenue | Growth |")),
            "{t:#}"
        );
    }
    assert!(tables.iter().any(|t| {
        t["original_text"]
            .as_str()
            .is_some_and(|t| t.contains("| Iberia | 96 million | -1% |"))
    }));
    let ru = pdf
        .iter()
        .find(|c| {
            c["original_text"]
                .as_str()
                .is_some_and(|t| t.contains("Казани"))
        })
        .expect("the Russian page");
    assert_eq!(ru["heading_path"][1], "3 Обзор рынка");
    // A heading set at the body size, known from the outline only.
    let tula = pdf
        .iter()
        .find(|c| {
            c["original_text"]
                .as_str()
                .is_some_and(|t| t.contains("Туле"))
        })
        .expect("the subsection");
    assert_eq!(
        tula["heading_path"],
        serde_json::json!(["Northwind Annual Report", "3 Обзор рынка", "3.1 Склады"])
    );
    let zh = pdf
        .iter()
        .find(|c| {
            c["original_text"]
                .as_str()
                .is_some_and(|t| t.contains("上海仓库"))
        })
        .expect("the Chinese page");
    assert_eq!(place(zh), Some(("page".into(), 4, 4)));

    // PPTX: one section per slide, titles and notes, the slide on every card.
    let slides = cards(&index, "docs/slides.pptx");
    for s in &slides {
        let (unit, first, last) = place(s).expect("a slide card has a place");
        assert_eq!((unit.as_str(), first), ("slide", last), "{s:#}");
        let title = s["heading_path"][0].as_str().expect("a section");
        assert!(title.starts_with(&format!("Slide {first}")), "{s:#}");
    }
    let notes = slides
        .iter()
        .find(|c| {
            c["original_text"]
                .as_str()
                .is_some_and(|t| t.contains("Notes: Iberia"))
        })
        .expect("notes");
    assert_eq!(place(notes), Some(("slide".into(), 3, 3)));
    assert!(slides.iter().any(|c| c["kind"] == "table"));
    let picture = slides
        .iter()
        .find(|c| c["kind"] == "image")
        .expect("picture");
    assert!(
        picture["original_text"]
            .as_str()
            .is_some_and(|t| t.contains("Bar chart of quarterly revenue by region")
                && t.contains("Figure 1:")),
        "alt text and caption: {picture:#}"
    );

    // DOCX: headings, list, a table with its header, a picture with its alt text.
    let docx = cards(&index, "docs/report.docx");
    let docx_text: String = docx
        .iter()
        .map(|c| c["original_text"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(docx_text.contains("- Revenue grew 3%."), "{docx_text}");
    assert!(docx.iter().any(|c| {
        c["kind"] == "table"
            && c["original_text"]
                .as_str()
                .is_some_and(|t| t.starts_with("| Region |"))
    }));
    assert!(docx.iter().any(|c| {
        c["kind"] == "image"
            && c["original_text"]
                .as_str()
                .is_some_and(|t| t.contains("Bar chart") && t.contains("image1.png"))
    }));
    assert!(docx.iter().any(|c| {
        c["heading_path"]
            .as_array()
            .is_some_and(|h| h.iter().any(|x| x == "3 Обзор рынка"))
    }));
    assert!(
        docx.iter()
            .all(|c| c.get("place").is_none_or(Value::is_null))
    );

    // HTML: navigation and footer gone, the table a table, no box drawing.
    let html = cards(&index, "docs/page.html");
    let html_text: String = html
        .iter()
        .map(|c| c["original_text"].as_str().unwrap_or("").to_string())
        .collect();
    for gone in [
        "Contact us",
        "All rights reserved",
        "customer portal",
        "─",
        "│",
    ] {
        assert!(!html_text.contains(gone), "{gone:?} in {html_text}");
    }
    let codes = html.iter().find(|c| c["kind"] == "table").expect("table");
    assert_eq!(
        codes["heading_path"],
        serde_json::json!(["Induction hobs", "Cleaning", "Error codes"])
    );

    // ODT: headings, a nested list, a table, a framed image with its caption.
    let odt = cards(&index, "docs/report.odt");
    let odt_text: String = odt
        .iter()
        .filter_map(|c| c["original_text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        odt_text.contains("Tilburg handled 41 000 orders & returns."),
        "{odt_text}"
    );
    assert!(
        odt_text.contains("- Tilburg\n  - Dock 4\n- Kazan"),
        "{odt_text}"
    );
    assert!(odt.iter().any(|c| {
        c["kind"] == "table"
            && c["original_text"]
                .as_str()
                .is_some_and(|t| t.starts_with("| Site | Orders |"))
    }));
    let plan = odt
        .iter()
        .find(|c| c["kind"] == "image")
        .expect("the image");
    assert_eq!(
        plan["original_text"],
        "![Floor plan of the Tilburg warehouse](plan.png)\nFigure 4: The warehouse floor."
    );
    assert_eq!(
        plan["heading_path"],
        serde_json::json!(["Warehouse report", "Sites"])
    );
    assert_eq!(plan["document"]["title"], "Warehouses 2025");

    // Spreadsheets and CSV: a table per sheet, in the sheet's section; dates as dates.
    let book = cards(&index, "docs/budget.xlsx");
    let sheet_tables: Vec<&Value> = book.iter().filter(|c| c["kind"] == "table").collect();
    assert!(!sheet_tables.is_empty(), "{book:#?}");
    for t in &sheet_tables {
        assert_eq!(t["heading_path"], serde_json::json!(["Sheet: Regions"]));
        assert!(
            t["original_text"]
                .as_str()
                .is_some_and(|x| x.starts_with("| Region | Budget | Approved |")),
            "{t:#}"
        );
    }
    let rows: String = sheet_tables
        .iter()
        .filter_map(|t| t["original_text"].as_str())
        .collect();
    assert!(rows.contains("| Benelux | 950.5 | 2025-03-15 |"), "{rows}");
    assert!(rows.contains("| Nordics | 1200 | 2025-03-14 |"), "{rows}");
    assert!(
        book.iter().all(|c| !c["original_text"]
            .as_str()
            .is_some_and(|t| t.contains("Empty"))),
        "the empty sheet adds nothing"
    );
    let stock = cards(&index, "docs/stock.csv");
    assert!(
        stock[0]["original_text"]
            .as_str()
            .is_some_and(|t| t.contains("| Hob, induction | Tilburg | 120 |")),
        "{stock:#?}"
    );

    // Search: the kind filter, and hits carry the place to cite.
    let hits = json(
        situate(&index).args([
            "search",
            "quarterly revenue by region",
            "--mode",
            "bm25",
            "--kind",
            "image",
        ]),
        0,
    );
    let hits = hits["hits"].as_array().expect("hits");
    assert!(hits.len() >= 3, "{hits:#?}");
    assert!(hits.iter().all(|h| h["kind"] == "image"));
    let pdf_hit = hits
        .iter()
        .find(|h| h["document_id"] == "docs/report.pdf")
        .expect("the PDF's figure");
    assert_eq!(
        pdf_hit["place"],
        serde_json::json!({"unit": "page", "first": 2, "last": 2})
    );
    let text = run(
        situate(&index).args([
            "search",
            "Казани склад",
            "--document",
            "docs/report.pdf",
            "--mode",
            "bm25",
            "-k",
            "1",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("cite      report.pdf p. 3"), "{text}");
    let bad = run(situate(&index).args(["search", "x", "--kind", "chart"]), 1);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown card kind \"chart\""));
}

#[test]
fn a_table_cut_into_pieces_repeats_its_header_row() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    let mut md = String::from(
        "# Prices\n\nTable 1: Prices by item.\n\n| Item | Price | Stock |\n|---|---|---|\n",
    );
    for i in 0..60 {
        md.push_str(&format!("| widget{i} | {}.50 | {} |\n", i + 1, 100 - i));
    }
    md.push_str("\nThe prices in Table 1 are in euros.\n");
    std::fs::write(docs.join("prices.md"), md).expect("write");
    let index = tmp.path().join("idx");
    run(
        situate(&index).arg("ingest").arg(&docs).args([
            "--embedder",
            "none",
            "--max-tokens",
            "60",
            "--overlap",
            "0",
        ]),
        0,
    );
    let cards = cards(&index, "docs/prices.md");
    let tables: Vec<&Value> = cards.iter().filter(|c| c["kind"] == "table").collect();
    assert!(tables.len() >= 3, "{cards:#?}");
    for t in &tables {
        let text = t["original_text"].as_str().expect("text");
        assert!(
            text.contains("| Item | Price | Stock |\n|---|---|---|"),
            "every piece has the header: {text}"
        );
        let context = t["generated_context"].as_str().expect("context");
        assert!(
            context.contains("The prices in Table 1 are in euros"),
            "{context}"
        );
    }
    assert!(
        tables[0]["original_text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Table 1:"))
    );
    // Every row is in exactly one piece.
    for i in 0..60 {
        let row = format!("| widget{i} |");
        let n = tables
            .iter()
            .filter(|t| {
                t["original_text"]
                    .as_str()
                    .is_some_and(|x| x.contains(&row))
            })
            .count();
        assert_eq!(n, 1, "{row}");
    }
}
