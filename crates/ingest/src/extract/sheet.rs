//! Spreadsheets (XLSX, XLSM, XLSB, XLS, ODS, read by `calamine`) and CSV/TSV files (read by
//! `csv`): a section per sheet (`# Sheet: NAME`) holding its used range as a table whose
//! first non-empty row is the header, so every piece of a long sheet repeats it.
//!
//! A spreadsheet is a zip (or an OLE file); before calamine reads it, the zip's declared
//! sizes are checked against the same caps as DOCX and PPTX, so a zip bomb is refused.

use super::{Extracted, Md};

/// Largest unpacked size of a spreadsheet's parts, in all.
const TOTAL_LIMIT: u64 = 256 << 20;

/// Reads a workbook.
pub fn read_workbook(bytes: Vec<u8>, what: &'static str) -> Result<Extracted, String> {
    use calamine::Reader;
    if bytes.starts_with(b"PK") {
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&bytes))
            .map_err(|e| format!("not a {what} file (not a zip package: {e})"))?;
        let mut total = 0u64;
        for i in 0..zip.len() {
            let f = zip
                .by_index_raw(i)
                .map_err(|e| format!("damaged {what} file: {e}"))?;
            total = total.saturating_add(f.size());
        }
        if total > TOTAL_LIMIT {
            return Err(format!(
                "the parts unpack to {total} bytes (limit {TOTAL_LIMIT}): a zip bomb or a damaged {what} file"
            ));
        }
    }
    let mut book = calamine::open_workbook_auto_from_rs(std::io::Cursor::new(bytes))
        .map_err(|e| format!("not a readable {what} file: {e}"))?;
    let mut md = Md::new(None);
    let names = book.sheet_names();
    let mut sheets = 0usize;
    for name in &names {
        let range = book
            .worksheet_range(name)
            .map_err(|e| format!("damaged {what} file: sheet {name}: {e}"))?;
        let rows: Vec<Vec<String>> = range
            .rows()
            .map(|r| r.iter().map(cell).collect::<Vec<_>>())
            .filter(|r: &Vec<String>| r.iter().any(|c| !c.trim().is_empty()))
            .collect();
        if rows.is_empty() {
            continue;
        }
        sheets += 1;
        md.heading(1, &format!("Sheet: {name}"));
        md.table(&rows);
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert("sheets".into(), names.len().into());
    let (text, layout) = md.finish();
    if sheets == 0 {
        return Ok(Extracted::default());
    }
    Ok(Extracted {
        text,
        title: None,
        layout,
        metadata,
    })
}

/// A cell as text: dates as ISO dates (times when they have one), whole floats without
/// `.0`.
fn cell(d: &calamine::Data) -> String {
    use calamine::{Data, DataType};
    match d {
        Data::DateTime(_) | Data::DateTimeIso(_) => match d.as_datetime() {
            Some(t) if t.time().to_string() == "00:00:00" => t.date().to_string(),
            Some(t) => t.to_string(),
            None => d.to_string(),
        },
        Data::Float(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", *f as i64),
        _ => d.to_string(),
    }
}

/// Reads a CSV (`,` or `;`, whichever the first line holds more of) or TSV file.
pub fn read_csv(text: &str, tab: bool) -> Result<Extracted, String> {
    let delimiter = if tab {
        b'\t'
    } else {
        let first = text.lines().next().unwrap_or("");
        if first.matches(';').count() > first.matches(',').count() {
            b';'
        } else {
            b','
        }
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("not a readable CSV file: row {}: {e}", i + 1))?;
        let row: Vec<String> = record.iter().map(str::to_string).collect();
        if row.iter().any(|c| !c.trim().is_empty()) {
            rows.push(row);
        }
    }
    let mut md = Md::new(None);
    md.table(&rows);
    let (text, layout) = md.finish();
    Ok(Extracted {
        text,
        title: None,
        layout,
        metadata: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_becomes_a_table_with_its_header_and_quoted_fields_kept_whole() {
        let x =
            read_csv("Item;Price\n\"widget, large\";3,50\n\nbolt;0,20\n", false).expect("reads");
        assert_eq!(
            x.text,
            "| Item | Price |\n|---|---|\n| widget, large | 3,50 |\n| bolt | 0,20 |\n"
        );
        let tsv = read_csv("a\tb\n1\t2\n", true).expect("reads");
        assert!(tsv.text.starts_with("| a | b |"));
    }

    #[test]
    fn a_file_that_is_no_workbook_says_so() {
        let err = read_workbook(b"plain text".to_vec(), "XLSX").expect_err("refused");
        assert!(err.starts_with("not a readable XLSX file"), "{err}");
    }
}
