//! The failure-rate plot of an evaluation (SVG, drawn with `plotters`).

use crate::report::ConfigReport;
use plotters::prelude::*;
use std::path::Path;

/// Draws one horizontal bar per configuration: its top-20 failure rate (1 − Pass@20), with
/// the relative reduction against the baseline written beside it.
pub fn failure_chart(rows: &[ConfigReport], title: &str, path: &Path) -> Result<(), String> {
    let n = rows.len().max(1);
    let max = rows
        .iter()
        .filter_map(|r| r.metrics.get("failure_rate@20").copied())
        .fold(0.0f64, f64::max)
        .max(0.01)
        * 1.35;
    let height = 90 + 42 * n as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(260)
        .build_cartesian_2d(0.0..max, (0..n).into_segmented())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("top-20 failure rate (1 − Pass@20), lower is better")
        .x_label_formatter(&|v| format!("{:.0}%", v * 100.0))
        .y_label_formatter(&|seg| match seg {
            SegmentValue::CenterOf(i) => rows.get(*i).map(|r| r.name.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .y_labels(n)
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, r) in rows.iter().enumerate() {
        let fail = r.metrics.get("failure_rate@20").copied().unwrap_or(0.0);
        let color = if i == 0 {
            RGBColor(150, 150, 150)
        } else {
            RGBColor(40, 110, 180)
        };
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (fail, SegmentValue::Exact(i + 1)),
                ],
                color.filled(),
            )))
            .map_err(|e| e.to_string())?;
        let label = match r.failure_reduction {
            Some(red) if i > 0 => format!(
                "{:.1}%  (failures {:+.1}% vs baseline)",
                fail * 100.0,
                -red * 100.0
            ),
            _ => format!("{:.1}%", fail * 100.0),
        };
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (fail + max * 0.01, SegmentValue::CenterOf(i)),
                ("sans-serif", 14),
            )))
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_one_bar_per_configuration() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("f.svg");
        let row = |name: &str, f: f64, red: Option<f64>| ConfigReport {
            name: name.into(),
            mode: "bm25".into(),
            context: "none".into(),
            rerank: "none".into(),
            metrics: [("failure_rate@20".to_string(), f)].into_iter().collect(),
            failure_reduction: red,
            queries_per_second: 1.0,
            abstain: None,
        };
        failure_chart(
            &[
                row("bm25+none+none", 0.2, Some(0.0)),
                row("bm25+structural+none", 0.15, Some(0.25)),
            ],
            "t",
            &p,
        )
        .expect("drawn");
        let svg = std::fs::read_to_string(&p).expect("svg");
        assert!(
            svg.starts_with("<svg")
                && svg.contains("bm25+structural+none")
                && svg.contains("failures -25.0% vs baseline")
        );
        assert!(svg.matches("<rect").count() >= 3, "background and two bars");
    }
}
