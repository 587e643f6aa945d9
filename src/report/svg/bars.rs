//! Horizontal bar charts: one group of bars per row label (a partitioning), one bar per series
//! (measured, predicted), as shares on a 0 to 100% axis. A value that is missing or not a
//! number draws no bar and says "not measured"; a bar never runs off the chart (values above
//! the axis are drawn to its end and printed as they are).

use super::{escape, num, open_svg, text, text_width, PALETTE};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One row of bars.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BarGroup {
    pub label: String,
    /// One value per series of the chart, a share (1.0 is 100%); None where there is none.
    pub values: Vec<Option<f64>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BarChart {
    pub title: String,
    /// What the axis measures ("of linear scaling").
    pub axis_label: String,
    /// The series' names, in the order of each group's values.
    pub series: Vec<String>,
    pub groups: Vec<BarGroup>,
}

const FONT_SIZE: f64 = 12.0;
const BAR_H: f64 = 14.0;
const GAP: f64 = 10.0;
const PLOT_W: f64 = 360.0;

/// The chart as one `<svg>` (see the module documentation of [`super`]).
pub fn bar_chart(c: &BarChart) -> String {
    let label_w = c
        .groups
        .iter()
        .map(|g| text_width(&g.label, FONT_SIZE))
        .fold(60.0, f64::max)
        .min(320.0);
    let left = label_w + 12.0;
    let top = 44.0;
    let n = c.series.len().max(1);
    let group_h = n as f64 * BAR_H + GAP;
    let plot_h = c.groups.len() as f64 * group_h;
    let width = left + PLOT_W + 90.0;
    let height = top + plot_h + 36.0;
    // The axis reaches 100%, or the largest value rounded up to the next quarter.
    let top_value = c
        .groups
        .iter()
        .flat_map(|g| g.values.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max);
    let axis_max = ((top_value * 4.0).ceil() / 4.0).min(4.0);
    let x = |v: f64| left + PLOT_W * (v.clamp(0.0, axis_max) / axis_max);
    let summary: Vec<String> = c
        .groups
        .iter()
        .map(|g| {
            let parts: Vec<String> = c
                .series
                .iter()
                .zip(&g.values)
                .map(|(s, v)| format!("{s} {}", pct(*v)))
                .collect();
            format!("{}: {}", g.label, parts.join(", "))
        })
        .collect();
    let mut out = String::new();
    open_svg(
        &mut out,
        width,
        height,
        &format!("{}. {}", c.title, summary.join("; ")),
        &c.title,
    );
    text(
        &mut out,
        4.0,
        16.0,
        13.0,
        "start",
        r#" font-weight="600""#,
        &c.title,
    );
    // Legend: a swatch and a name per series.
    let mut lx = left;
    for (i, s) in c.series.iter().enumerate() {
        let _ = write!(
            out,
            r#"<rect x="{}" y="24" width="12" height="10" fill="{}"{}/>"#,
            num(lx),
            PALETTE[i % PALETTE.len()],
            dash(i)
        );
        text(&mut out, lx + 16.0, 33.0, 11.0, "start", "", s);
        lx += 28.0 + text_width(s, 11.0);
    }
    // Grid and axis ticks every quarter.
    let quarters = (axis_max * 4.0).round() as usize;
    for q in 0..=quarters {
        let v = q as f64 / 4.0;
        let gx = x(v);
        let _ = write!(
            out,
            r##"<line x1="{gx}" y1="{}" x2="{gx}" y2="{}" stroke="#ddd"/>"##,
            num(top - 4.0),
            num(top + plot_h),
            gx = num(gx)
        );
        text(
            &mut out,
            gx,
            top + plot_h + 14.0,
            10.0,
            "middle",
            r##" fill="#555""##,
            &format!("{:.0}%", v * 100.0),
        );
    }
    text(
        &mut out,
        left + PLOT_W / 2.0,
        top + plot_h + 30.0,
        11.0,
        "middle",
        r##" fill="#333""##,
        &c.axis_label,
    );
    for (k, g) in c.groups.iter().enumerate() {
        let y0 = top + k as f64 * group_h;
        text(
            &mut out,
            left - 8.0,
            y0 + n as f64 * BAR_H / 2.0 + 4.0,
            FONT_SIZE,
            "end",
            "",
            &g.label,
        );
        for (i, s) in c.series.iter().enumerate() {
            let y = y0 + i as f64 * BAR_H;
            let v = g.values.get(i).copied().flatten().filter(|v| v.is_finite());
            match v {
                Some(v) => {
                    let _ = write!(
                        out,
                        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"{}><title>{}</title></rect>"#,
                        num(left),
                        num(y + 1.0),
                        num(x(v) - left),
                        num(BAR_H - 2.0),
                        PALETTE[i % PALETTE.len()],
                        dash(i),
                        escape(&format!("{}, {s}: {}", g.label, pct(Some(v))))
                    );
                    text(
                        &mut out,
                        x(v) + 4.0,
                        y + BAR_H - 3.0,
                        10.0,
                        "start",
                        "",
                        &pct(Some(v)),
                    );
                }
                None => text(
                    &mut out,
                    left + 4.0,
                    y + BAR_H - 3.0,
                    10.0,
                    "start",
                    r##" fill="#555""##,
                    &format!("{s}: not measured"),
                ),
            }
        }
    }
    out.push_str("</svg>");
    out
}

/// Series after the first are outlined dark as well as coloured, so that print tells them apart.
fn dash(i: usize) -> &'static str {
    if i == 0 {
        ""
    } else {
        r##" stroke="#000" stroke-dasharray="3 2" fill-opacity="0.55""##
    }
}

fn pct(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        Some(v) => format!("{:.0}%", 100.0 * v),
        None => "not measured".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(values: Vec<Option<f64>>) -> BarChart {
        BarChart {
            title: "Scaling <by> method".into(),
            axis_label: "of linear scaling".into(),
            series: vec!["measured".into(), "predicted".into()],
            groups: vec![BarGroup {
                label: "tensor-parallel & co".into(),
                values,
            }],
        }
    }

    #[test]
    fn bars_are_as_long_as_their_share_and_words_are_escaped() {
        let svg = bar_chart(&chart(vec![Some(0.5), Some(1.0)]));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert!(svg.contains("Scaling &lt;by&gt; method"), "{svg}");
        assert!(svg.contains("tensor-parallel &amp; co"), "{svg}");
        assert!(!svg.contains("<by>") && !svg.contains("& co"), "{svg}");
        // Half the plot for 50%, all of it for 100%.
        assert!(svg.contains(r#"width="180" height="12""#), "{svg}");
        assert!(svg.contains(r#"width="360" height="12""#), "{svg}");
        assert!(svg.contains(">50%<") && svg.contains(">100%<"), "{svg}");
    }

    #[test]
    fn a_missing_or_broken_value_draws_no_bar_and_says_so() {
        for v in [None, Some(f64::NAN), Some(f64::INFINITY)] {
            let svg = bar_chart(&chart(vec![v, Some(0.25)]));
            assert!(svg.contains("measured: not measured"), "{svg}");
            assert_eq!(
                svg.matches("<rect x=").count(),
                2 + 1,
                "two swatches, one bar: {svg}"
            );
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
    }

    #[test]
    fn a_value_above_the_axis_widens_the_axis_and_never_runs_off() {
        let svg = bar_chart(&chart(vec![Some(1.1), Some(-0.5)]));
        // The axis runs to 125%; 110% is 88% of the plot; a negative share draws nothing wide.
        assert!(svg.contains(">125%<"), "{svg}");
        assert!(svg.contains(r#"width="316.8""#), "{svg}");
        assert!(svg.contains(r#"width="0" height="12""#), "{svg}");
    }
}
