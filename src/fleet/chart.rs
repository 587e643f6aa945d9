//! A strip chart of one figure across a fleet: a dot per node on one axis, the suite's floor
//! dashed, the fleet's median ticked, and the nodes that failed the floor or were flagged as
//! outliers in red. Inline SVG; every name is escaped.

use super::Distribution;
use crate::report::svg::{escape, format_number};
use std::collections::BTreeSet;

const W: f64 = 640.0;
const H: f64 = 64.0;
const LEFT: f64 = 16.0;
const RIGHT: f64 = 16.0;
const AXIS_Y: f64 = 34.0;

/// The chart of `d`; `marked` names the nodes drawn in red (failed this figure's floor, or
/// flagged as outliers of it).
pub fn strip(d: &Distribution, marked: &BTreeSet<String>) -> String {
    let values: Vec<f64> = d
        .points
        .iter()
        .map(|p| p.1)
        .chain(d.limit)
        .filter(|v| v.is_finite())
        .collect();
    let title = format!("{} {} ({})", d.check, d.label(), d.unit);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{}\"><title>{}</title>",
        escape(&title),
        escape(&title)
    );
    if values.is_empty() {
        s.push_str("<text x=\"16\" y=\"30\" font-size=\"12\">no figures</text></svg>");
        return s;
    }
    let lo = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    // In halves, and clamped to the finite range: figures spanning -1e308 to 1e308 (a damaged
    // or hostile file) would otherwise overflow to infinity and draw at NaN.
    let pad = ((hi / 2.0 - lo / 2.0) * 0.1).max(hi.abs() * 0.01).max(1e-9);
    let (lo, hi) = ((lo - pad).max(f64::MIN), (hi + pad).min(f64::MAX));
    let x = |v: f64| {
        let t = (v / 2.0 - lo / 2.0) / (hi / 2.0 - lo / 2.0);
        LEFT + if t.is_finite() {
            t.clamp(0.0, 1.0)
        } else {
            0.5
        } * (W - LEFT - RIGHT)
    };
    s.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{AXIS_Y}\" x2=\"{}\" y2=\"{AXIS_Y}\" stroke=\"#d0d7de\"/>",
        W - RIGHT
    ));
    for (v, anchor) in [(lo + pad, "start"), (hi - pad, "end")] {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"58\" font-size=\"10\" text-anchor=\"{anchor}\" fill=\"#6e7781\">{}</text>",
            x(v),
            escape(&format_number(v))
        ));
    }
    if let Some(l) = d.limit.filter(|l| l.is_finite()) {
        s.push_str(&format!(
            "<line x1=\"{0:.1}\" y1=\"8\" x2=\"{0:.1}\" y2=\"46\" stroke=\"#cf222e\" stroke-dasharray=\"4 3\"><title>{1}</title></line><text x=\"{0:.1}\" y=\"7\" font-size=\"10\" text-anchor=\"middle\" fill=\"#cf222e\">{1}</text>",
            x(l),
            escape(&format!(
                "{} {}",
                if d.higher_is_better { "floor" } else { "ceiling" },
                format_number(l)
            ))
        ));
    }
    if d.median.is_finite() {
        s.push_str(&format!(
            "<line x1=\"{0:.1}\" y1=\"22\" x2=\"{0:.1}\" y2=\"46\" stroke=\"#1f2328\" stroke-width=\"2\"><title>fleet median {1}</title></line>",
            x(d.median),
            escape(&format_number(d.median))
        ));
    }
    for (i, (node, v)) in d.points.iter().enumerate() {
        if !v.is_finite() {
            continue;
        }
        // Nodes with the same value are spread a little up and down, so each shows.
        let dy = [0.0, -6.0, 6.0, -3.0, 3.0][i % 5];
        let red = marked.contains(node);
        s.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{}\" fill=\"{}\" fill-opacity=\"0.8\"><title>{}</title></circle>",
            x(*v),
            AXIS_Y + dy,
            if red { 5.0 } else { 3.5 },
            if red { "#cf222e" } else { "#0969da" },
            escape(&format!("{node}: {} {}", format_number(*v), d.unit))
        ));
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(points: &[(&str, f64)], limit: Option<f64>) -> Distribution {
        Distribution {
            suite: "h100-sxm-8".into(),
            check: "p2p_bandwidth".into(),
            metric: "p2p_read".into(),
            figure: "p2p_read".into(),
            class: Default::default(),
            unit: "GB/s".into(),
            higher_is_better: true,
            limit,
            conditions: String::new(),
            median: 390.0,
            points: points.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn each_node_is_a_dot_the_marked_ones_red_and_names_are_escaped() {
        let d = dist(
            &[("n1", 390.0), ("n2", 391.0), ("<b>&x", 300.0)],
            Some(335.0),
        );
        let marked: BTreeSet<String> = ["<b>&x".to_string()].into();
        let s = strip(&d, &marked);
        assert_eq!(s.matches("<circle").count(), 3);
        assert_eq!(s.matches("#cf222e\" fill-opacity").count(), 1);
        assert!(s.contains("&lt;b&gt;&amp;x: 300 GB/s"), "{s}");
        assert!(!s.contains("<b>"));
        assert!(s.contains("floor 335"));
        assert!(s.contains("fleet median 390"));
    }

    #[test]
    fn a_node_name_cannot_reorder_or_hide_text_in_its_tooltip() {
        let d = dist(&[("n1\u{202e}9gpu\u{1b}[2K", 390.0)], None);
        let s = strip(&d, &BTreeSet::new());
        assert!(s.contains("n1\\u{202e}9gpu\\u{1b}[2K: 390 GB/s"), "{s}");
        assert!(!s.contains('\u{202e}') && !s.contains('\u{1b}'), "{s}");
    }

    #[test]
    fn no_figure_is_said_and_nan_is_not_drawn() {
        assert!(strip(&dist(&[], None), &BTreeSet::new()).contains("no figures"));
        let s = strip(
            &dist(&[("n1", f64::NAN), ("n2", 5.0)], None),
            &BTreeSet::new(),
        );
        assert_eq!(s.matches("<circle").count(), 1);
        assert!(!s.contains("NaN"));
        // Figures spanning the whole range of a float (a damaged file): every position is a
        // number within the chart, the two ends at its two edges.
        let s = strip(
            &dist(
                &[("n1", -1e308), ("n2", 1e308), ("n3", 0.0)],
                Some(f64::MAX),
            ),
            &BTreeSet::new(),
        );
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
        let cx: Vec<f64> = s
            .split("cx=\"")
            .skip(1)
            .map(|t| t.split('"').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(cx.len(), 3);
        assert!(cx.iter().all(|x| (LEFT..=W - RIGHT).contains(x)), "{cx:?}");
        assert!(cx[0] < cx[2] && cx[2] < cx[1], "{cx:?}");
    }
}
