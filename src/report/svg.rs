//! Inline SVG charts for the HTML certificate.
//!
//! Every function returns one self-contained `<svg>` element as a string:
//!
//! * no scripts, no external references (the only `url(#…)` points at a pattern
//!   defined inside the same SVG), no web fonts: text uses
//!   `font-family="system-ui, sans-serif"`;
//! * a `viewBox` with `width="100%"` and a `max-width`, so it shrinks to phone
//!   width and keeps its aspect ratio;
//! * `role="img"`, an `aria-label` summary and `<title>` elements (browsers show
//!   them as tooltips; screen readers read them);
//! * printable: status is never carried by colour alone. Failing heatmap cells are
//!   red, hatched, thickly outlined and say `✕ FAIL`; warnings say `! warn`; series
//!   in line charts differ by marker shape as well as colour;
//! * every user string is XML-escaped, every number is written with at most two
//!   decimals, and non-finite values never reach the output, so the result is
//!   deterministic and compact.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

const FONT: &str = "system-ui, sans-serif";

mod bars;
pub use bars::{bar_chart, BarChart, BarGroup};

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// XML-escapes `s` for use in element text or a double-quoted attribute. Control characters
/// (which XML 1.0 forbids or a tooltip would obey), bidi overrides and the other hidden
/// characters are shown as escapes first ([`crate::console::visible`]), as on the rest of
/// the page.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in crate::console::visible(s).chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Drops trailing zeros (and a trailing dot) from a decimal string, and turns
/// `-0` into `0`.
fn trim_decimals(mut s: String) -> String {
    if s.contains('.') && !s.contains('e') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".to_string();
    }
    s
}

/// A coordinate or length for an attribute: at most two decimals, never
/// `NaN`/`inf` (non-finite becomes `0`).
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".to_string();
    }
    trim_decimals(format!("{v:.2}"))
}

/// A measured value as printed inside a heatmap cell or tooltip: three
/// significant-ish digits, at most two decimals (`391`, `45.2`, `3.14`).
fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    let a = v.abs();
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    trim_decimals(s)
}

/// How axis tick labels are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AxisFormat {
    /// Plain numbers: `0.5`, `12`, `65536`, `2.5M`, `1e-3`.
    #[default]
    Number,
    /// Binary byte sizes: `512 B`, `1 KiB`, `1.5 MiB`, `1 GiB`.
    Bytes,
}

impl AxisFormat {
    /// Formats one value; an empty string for non-finite input.
    pub fn format(self, v: f64) -> String {
        match self {
            AxisFormat::Number => format_number(v),
            AxisFormat::Bytes => format_bytes(v),
        }
    }
}

/// Plain number with at most two decimals; SI suffix from a million up, an
/// exponent form below 0.01 and from 1e18 up.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    if !(0.01..1e18).contains(&a) {
        // "1.50e-3" -> "1.5e-3"
        let s = format!("{v:.2e}");
        if let Some((mant, exp)) = s.split_once('e') {
            return format!("{}e{exp}", trim_decimals(mant.to_string()));
        }
        return s;
    }
    if a >= 1e6 {
        for (scale, suffix) in [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")] {
            if a >= scale {
                return format!("{}{suffix}", trim_decimals(format!("{:.2}", v / scale)));
            }
        }
    }
    trim_decimals(format!("{v:.2}"))
}

/// Binary byte size with at most two decimals: `1 KiB`, `1 MiB`, `1 GiB`.
pub fn format_bytes(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let mut a = v.abs();
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut i = 0;
    while a >= 1024.0 && i + 1 < units.len() {
        a /= 1024.0;
        i += 1;
    }
    let n = trim_decimals(format!("{a:.2}"));
    if n == "0" {
        return "0 B".to_string();
    }
    format!("{sign}{n} {}", units[i])
}

/// Rough rendered width of `s` at `font_size` (system-ui averages about 0.6 em).
fn text_width(s: &str, font_size: f64) -> f64 {
    s.chars().count() as f64 * font_size * 0.6
}

/// FNV-1a, used to give each SVG's internal ids a deterministic, content-derived
/// suffix so several charts can share one HTML page.
fn fnv(parts: &[&str]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h ^ (h >> 32)) as u32
}

fn open_svg(out: &mut String, w: f64, h: f64, aria: &str, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" style="max-width:{w}px;height:auto;display:block" role="img" aria-label="{aria}" font-family="{FONT}"><title>{title}</title>"#,
        w = num(w),
        h = num(h),
        aria = escape(aria),
        title = escape(title),
    );
}

/// `<text>` with escaped content. `extra` is raw attribute text (trusted).
/// Axis titles, each centred on its point and left out when empty: one across (horizontal) and
/// one up the left side (rotated a quarter turn).
fn axis_titles(
    out: &mut String,
    font: f64,
    fill: &str,
    across: (&str, f64, f64),
    up: (&str, f64, f64),
) {
    let (label, x, y) = across;
    if !label.is_empty() {
        text(
            out,
            x,
            y,
            font,
            "middle",
            &format!(r#" fill="{fill}""#),
            label,
        );
    }
    let (label, x, y) = up;
    if !label.is_empty() {
        let extra = format!(
            r#" fill="{fill}" transform="rotate(-90 {} {})""#,
            num(x),
            num(y)
        );
        text(out, x, y, font, "middle", &extra, label);
    }
}

fn text(out: &mut String, x: f64, y: f64, size: f64, anchor: &str, extra: &str, content: &str) {
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" font-size="{}" text-anchor="{anchor}"{extra}>{}</text>"#,
        num(x),
        num(y),
        num(size),
        escape(content)
    );
}

fn rgb_hex(c: (f64, f64, f64)) -> String {
    let q = |v: f64| v.round().clamp(0.0, 255.0) as u8;
    format!("#{:02x}{:02x}{:02x}", q(c.0), q(c.1), q(c.2))
}

/// Lays legend items out left to right, wrapping at `max_w`; returns the
/// position of each item and the total height used.
fn flow(widths: &[f64], x0: f64, y0: f64, max_w: f64, row_h: f64) -> (Vec<(f64, f64)>, f64) {
    let mut pos = Vec::with_capacity(widths.len());
    let (mut x, mut y) = (x0, y0);
    for &w in widths {
        if x > x0 && x + w > x0 + max_w {
            x = x0;
            y += row_h;
        }
        pos.push((x, y));
        x += w;
    }
    let h = if widths.is_empty() {
        0.0
    } else {
        y - y0 + row_h
    };
    (pos, h)
}

// ---------------------------------------------------------------------------
// Heatmap
// ---------------------------------------------------------------------------

/// Outcome of one heatmap cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    #[default]
    Pass,
    Warn,
    Fail,
    Skip,
    /// The diagonal (a GPU to itself) and other pairs that do not exist.
    NotApplicable,
}

impl CellStatus {
    fn word(self) -> &'static str {
        match self {
            CellStatus::Pass => "pass",
            CellStatus::Warn => "WARN",
            CellStatus::Fail => "FAIL",
            CellStatus::Skip => "skipped",
            CellStatus::NotApplicable => "n/a",
        }
    }
}

/// One cell: the measured value, what was expected, the verdict and an
/// optional note (shown in the tooltip only).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HeatCell {
    pub value: Option<f64>,
    pub expected: Option<f64>,
    pub status: CellStatus,
    pub note: Option<String>,
}

/// A matrix of pairs (rows: source, columns: destination, typically GPUs).
///
/// `cells[r][c]` belongs to `row_labels[r]` and `col_labels[c]`. Ragged input is
/// tolerated: missing cells are drawn as n/a, missing labels as their index.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Heatmap {
    pub title: String,
    pub unit: String,
    pub row_labels: Vec<String>,
    pub col_labels: Vec<String>,
    pub cells: Vec<Vec<HeatCell>>,
    pub row_axis: String,
    pub col_axis: String,
}

// Kept light enough for dark text throughout, so red failures stand out
// (also in grey-scale print, where the blue scale stays light grey).
const SHADE_LO: (f64, f64, f64) = (247.0, 251.0, 255.0);
const SHADE_HI: (f64, f64, f64) = (107.0, 174.0, 214.0);
const FAIL_FILL: &str = "#c62828";
const FAIL_OUTLINE: &str = "#3b0000";
const WARN_FILL: &str = "#f4c542";
const WARN_OUTLINE: &str = "#7a5600";
const NA_FILL: &str = "#eeeeee";

/// Fill for a passing cell at fraction `t` (0..=1) of the reference.
fn shade(t: f64) -> String {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mix = |a: f64, b: f64| a + (b - a) * t;
    let c = (
        mix(SHADE_LO.0, SHADE_HI.0),
        mix(SHADE_LO.1, SHADE_HI.1),
        mix(SHADE_LO.2, SHADE_HI.2),
    );
    rgb_hex(c)
}

/// Renders a heatmap of pairs.
///
/// Passing cells are shaded on a blue scale by `value / expected`, or by
/// `value / largest value in the matrix` for cells without an expectation;
/// the measured value is printed in every cell. Warnings are amber with
/// `! warn`; failures are red, hatched, thickly outlined and marked `✕ FAIL`;
/// skipped cells are dashed white; the diagonal (`NotApplicable`) is grey `—`.
/// A legend below explains the shading and the marks present.
///
/// A 0×0 heatmap (no rows or no columns) renders a small SVG with the title and
/// "no pairs", so callers can embed the result unconditionally.
pub fn heatmap(h: &Heatmap) -> String {
    let n_rows = h.row_labels.len().max(h.cells.len());
    let n_cols = h
        .col_labels
        .len()
        .max(h.cells.iter().map(Vec::len).max().unwrap_or(0));
    if n_rows == 0 || n_cols == 0 {
        return empty_chart(&h.title, "no pairs", 320.0);
    }

    let row_label = |r: usize| {
        h.row_labels
            .get(r)
            .cloned()
            .unwrap_or_else(|| r.to_string())
    };
    let col_label = |c: usize| {
        h.col_labels
            .get(c)
            .cloned()
            .unwrap_or_else(|| c.to_string())
    };
    let cell_at = |r: usize, c: usize| h.cells.get(r).and_then(|row| row.get(c));
    let finite_pos = |v: Option<f64>| v.filter(|x| x.is_finite() && *x > 0.0);

    // Reference for cells without an expectation: the largest value shown.
    let max_val = h
        .cells
        .iter()
        .flatten()
        .filter_map(|c| c.value.filter(|v| v.is_finite()))
        .fold(f64::NEG_INFINITY, f64::max);
    let max_ref = finite_pos(Some(max_val));
    let (mut with_exp, mut without_exp) = (0usize, 0usize);
    let (mut n_fail, mut n_warn, mut n_skip, mut n_na) = (0usize, 0usize, 0usize, 0usize);
    for r in 0..n_rows {
        for c in 0..n_cols {
            let Some(cell) = cell_at(r, c) else {
                n_na += 1;
                continue;
            };
            match cell.status {
                CellStatus::Fail => n_fail += 1,
                CellStatus::Warn => n_warn += 1,
                CellStatus::Skip => n_skip += 1,
                CellStatus::NotApplicable => n_na += 1,
                CellStatus::Pass => {}
            }
            if cell.value.is_some_and(f64::is_finite) && cell.status != CellStatus::NotApplicable {
                if finite_pos(cell.expected).is_some() {
                    with_exp += 1;
                } else {
                    without_exp += 1;
                }
            }
        }
    }
    let ratio = |cell: &HeatCell| -> Option<f64> {
        let v = cell.value.filter(|v| v.is_finite())?;
        let reference = finite_pos(cell.expected).or(max_ref)?;
        Some(v / reference).filter(|r| r.is_finite())
    };

    // --- layout -----------------------------------------------------------
    let pad = 12.0;
    let cw = if n_cols <= 10 { 58.0 } else { 46.0 };
    let ch = 40.0;
    let lab_font = 12.0;
    let title_font = 15.0;
    let row_lab_w = (0..n_rows)
        .map(|r| text_width(&row_label(r), lab_font))
        .fold(8.0, f64::max);
    let col_lab_w = (0..n_cols)
        .map(|c| text_width(&col_label(c), lab_font))
        .fold(0.0, f64::max);
    let rotate_cols = col_lab_w > cw - 6.0;
    let col_lab_h = if rotate_cols {
        col_lab_w * 0.71 + 12.0
    } else {
        20.0
    };
    let row_axis_w = if h.row_axis.is_empty() { 0.0 } else { 20.0 };
    let col_axis_h = if h.col_axis.is_empty() { 0.0 } else { 18.0 };
    let title_h = if h.title.is_empty() { 0.0 } else { 26.0 };

    let gx = pad + row_axis_w + row_lab_w + 8.0;
    let gy = pad + title_h + col_axis_h + col_lab_h;
    let grid_w = n_cols as f64 * cw;
    let grid_h = n_rows as f64 * ch;
    let overhang = if rotate_cols { col_lab_w * 0.71 } else { 0.0 };
    let mut width = (gx + grid_w + pad + overhang)
        .max(pad * 2.0 + text_width(&h.title, title_font))
        .max(360.0);

    // Legend items: (width, kind).
    let leg_font = 11.0;
    let scale_caption = match (with_exp > 0, without_exp > 0) {
        (true, false) => "% of expected",
        (false, true) | (false, false) => "% of max",
        (true, true) => "% of expected (or of max)",
    };
    let mut legend: Vec<(f64, Legend)> = Vec::new();
    if !h.unit.is_empty() {
        let s = format!("values in {}", h.unit);
        legend.push((text_width(&s, leg_font) + 14.0, Legend::Text(s)));
    }
    let scale_text = format!("100 {scale_caption}");
    legend.push((
        text_width("0", leg_font) + 4.0 + 60.0 + 4.0 + text_width(&scale_text, leg_font) + 14.0,
        Legend::Scale(scale_text),
    ));
    let mut push_item = |status: CellStatus, label: &str| {
        legend.push((
            18.0 + text_width(label, leg_font) + 14.0,
            Legend::Status(status, label.to_string()),
        ));
    };
    push_item(CellStatus::Fail, "✕ fail");
    push_item(CellStatus::Warn, "! warn");
    if n_skip > 0 {
        push_item(CellStatus::Skip, "skipped");
    }
    if n_na > 0 {
        push_item(CellStatus::NotApplicable, "n/a");
    }
    let widest_item = legend.iter().map(|l| l.0).fold(0.0, f64::max);
    width = width.max(widest_item + 2.0 * pad);
    let leg_y = gy + grid_h + 14.0;
    let widths: Vec<f64> = legend.iter().map(|l| l.0).collect();
    let (leg_pos, leg_h) = flow(&widths, pad, leg_y, width - 2.0 * pad, 20.0);
    let height = leg_y + leg_h + pad - 4.0;

    // --- output -----------------------------------------------------------
    let id = format!(
        "nc{:08x}",
        fnv(&[
            "heatmap",
            &h.title,
            &h.row_labels.join("\u{1}"),
            &h.col_labels.join("\u{1}"),
        ])
    );
    let mut aria = format!("{}: heatmap of {n_rows} by {n_cols} pairs", h.title);
    let _ = write!(aria, ", {n_fail} failing, {n_warn} warning");
    let mut out = String::with_capacity(2048 + n_rows * n_cols * 400);
    open_svg(&mut out, width, height, &aria, &h.title);
    let _ = write!(
        out,
        r##"<defs><pattern id="{id}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="2.5" height="6" fill="#ffffff" fill-opacity="0.3"/></pattern></defs>"##
    );
    if !h.title.is_empty() {
        text(
            &mut out,
            pad,
            pad + 15.0,
            title_font,
            "start",
            r#" font-weight="600""#,
            &h.title,
        );
    }
    axis_titles(
        &mut out,
        lab_font,
        "#444",
        (&h.col_axis, gx + grid_w / 2.0, pad + title_h + 12.0),
        (&h.row_axis, pad + 12.0, gy + grid_h / 2.0),
    );
    for c in 0..n_cols {
        let x = gx + (c as f64 + 0.5) * cw;
        if rotate_cols {
            let (x, y) = (x - 4.0, gy - 6.0);
            let extra = format!(r#" transform="rotate(-45 {} {})""#, num(x), num(y));
            text(&mut out, x, y, lab_font, "start", &extra, &col_label(c));
        } else {
            text(&mut out, x, gy - 6.0, lab_font, "middle", "", &col_label(c));
        }
    }
    for r in 0..n_rows {
        let y = gy + (r as f64 + 0.5) * ch + 4.0;
        text(&mut out, gx - 8.0, y, lab_font, "end", "", &row_label(r));
    }

    let na = HeatCell {
        status: CellStatus::NotApplicable,
        ..HeatCell::default()
    };
    for r in 0..n_rows {
        for c in 0..n_cols {
            let cell = cell_at(r, c).unwrap_or(&na);
            let x = gx + c as f64 * cw;
            let y = gy + r as f64 * ch;
            draw_cell(
                &mut out,
                &id,
                cell,
                ratio(cell),
                (x, y, cw, ch),
                &format!("{} → {}", row_label(r), col_label(c)),
                &h.unit,
            );
        }
    }

    for ((_, item), (x, y)) in legend.iter().zip(leg_pos) {
        let mid = y + 10.0;
        match item {
            Legend::Text(s) => text(
                &mut out,
                x,
                mid + 4.0,
                leg_font,
                "start",
                r##" fill="#444""##,
                s,
            ),
            Legend::Scale(caption) => {
                text(
                    &mut out,
                    x,
                    mid + 4.0,
                    leg_font,
                    "start",
                    r##" fill="#444""##,
                    "0",
                );
                let sx = x + text_width("0", leg_font) + 4.0;
                for i in 0..5 {
                    let fill = shade(i as f64 / 4.0);
                    let _ = write!(
                        out,
                        r##"<rect x="{}" y="{}" width="12" height="12" fill="{fill}" stroke="#999" stroke-width="0.5"/>"##,
                        num(sx + i as f64 * 12.0),
                        num(mid - 6.0)
                    );
                }
                text(
                    &mut out,
                    sx + 64.0,
                    mid + 4.0,
                    leg_font,
                    "start",
                    r##" fill="#444""##,
                    caption,
                );
            }
            Legend::Status(status, label) => {
                legend_swatch(&mut out, &id, *status, x, mid - 7.0);
                text(
                    &mut out,
                    x + 18.0,
                    mid + 4.0,
                    leg_font,
                    "start",
                    r##" fill="#444""##,
                    label,
                );
            }
        }
    }
    out.push_str("</svg>");
    out
}

enum Legend {
    Text(String),
    Scale(String),
    Status(CellStatus, String),
}

fn legend_swatch(out: &mut String, id: &str, status: CellStatus, x: f64, y: f64) {
    let (x, y) = (num(x), num(y));
    let _ = match status {
        CellStatus::Fail => write!(
            out,
            r#"<rect x="{x}" y="{y}" width="14" height="14" fill="{FAIL_FILL}" stroke="{FAIL_OUTLINE}" stroke-width="2"/><rect x="{x}" y="{y}" width="14" height="14" fill="url(#{id}-hatch)"/>"#
        ),
        CellStatus::Warn => write!(
            out,
            r#"<rect x="{x}" y="{y}" width="14" height="14" fill="{WARN_FILL}" stroke="{WARN_OUTLINE}" stroke-width="1.5"/>"#
        ),
        CellStatus::Skip => write!(
            out,
            r##"<rect x="{x}" y="{y}" width="14" height="14" fill="#ffffff" stroke="#888" stroke-dasharray="3 2"/>"##
        ),
        CellStatus::NotApplicable | CellStatus::Pass => write!(
            out,
            r##"<rect x="{x}" y="{y}" width="14" height="14" fill="{NA_FILL}" stroke="#bbb" stroke-width="0.5"/>"##
        ),
    };
}

fn draw_cell(
    out: &mut String,
    id: &str,
    cell: &HeatCell,
    ratio: Option<f64>,
    (x, y, cw, ch): (f64, f64, f64, f64),
    pair: &str,
    unit: &str,
) {
    let value = cell.value.filter(|v| v.is_finite());
    let value_s = value.map(fmt_value);

    // Tooltip: "GPU0 → GPU3: 391 GB/s (expected 400 GB/s, 98%) — FAIL: note"
    let with_unit = |v: f64| {
        if unit.is_empty() {
            fmt_value(v)
        } else {
            format!("{} {unit}", fmt_value(v))
        }
    };
    let mut tip = format!("{pair}: ");
    match value {
        Some(v) => tip.push_str(&with_unit(v)),
        None => tip.push_str("no value"),
    }
    if let Some(e) = cell.expected.filter(|e| e.is_finite()) {
        let _ = write!(tip, " (expected {}", with_unit(e));
        if let (Some(v), true) = (value, e > 0.0) {
            let _ = write!(tip, ", {}%", fmt_value(v / e * 100.0));
        }
        tip.push(')');
    }
    let _ = write!(tip, " — {}", cell.status.word());
    if let Some(note) = cell.note.as_deref().filter(|n| !n.is_empty()) {
        let _ = write!(tip, ": {note}");
    }

    let class = match cell.status {
        CellStatus::Pass => "cell pass",
        CellStatus::Warn => "cell warn",
        CellStatus::Fail => "cell fail",
        CellStatus::Skip => "cell skip",
        CellStatus::NotApplicable => "cell na",
    };
    let _ = write!(out, r#"<g class="{class}"><title>{}</title>"#, escape(&tip));
    let (rx, ry, rw, rh) = (num(x + 1.0), num(y + 1.0), num(cw - 2.0), num(ch - 2.0));
    let cx = x + cw / 2.0;
    // Shrink the value font if a long number would not fit the cell.
    let value_font = |s: &str| (13.0f64).min((cw - 8.0) / (s.chars().count().max(1) as f64 * 0.62));
    let centred = y + ch / 2.0 + 4.5;
    // A flagged cell: its value (or a dash) above a small badge.
    let value_and_badge = |out: &mut String, value_attrs: &str, badge_attrs: &str, badge: &str| {
        let s = value_s.clone().unwrap_or_else(|| "—".to_string());
        text(out, cx, y + 18.0, value_font(&s), "middle", value_attrs, &s);
        text(out, cx, y + 32.0, 10.0, "middle", badge_attrs, badge);
    };

    match cell.status {
        CellStatus::Pass => {
            let fill = shade(ratio.unwrap_or(0.3));
            let _ = write!(
                out,
                r#"<rect x="{rx}" y="{ry}" width="{rw}" height="{rh}" fill="{fill}"/>"#
            );
            let s = value_s.unwrap_or_else(|| "ok".to_string());
            text(
                out,
                cx,
                centred,
                value_font(&s),
                "middle",
                r##" fill="#111111""##,
                &s,
            );
        }
        CellStatus::Warn => {
            let _ = write!(
                out,
                r#"<rect x="{rx}" y="{ry}" width="{rw}" height="{rh}" fill="{WARN_FILL}" stroke="{WARN_OUTLINE}" stroke-width="1.5"/>"#
            );
            value_and_badge(
                out,
                r##" fill="#111111""##,
                r##" fill="#111111" font-weight="700""##,
                "! warn",
            );
        }
        CellStatus::Fail => {
            let _ = write!(
                out,
                r#"<rect x="{rx}" y="{ry}" width="{rw}" height="{rh}" fill="{FAIL_FILL}"/><rect x="{rx}" y="{ry}" width="{rw}" height="{rh}" fill="url(#{id}-hatch)"/><rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="{FAIL_OUTLINE}" stroke-width="3"/>"#,
                num(x + 2.5),
                num(y + 2.5),
                num(cw - 5.0),
                num(ch - 5.0),
            );
            let bold_white = r##" fill="#ffffff" font-weight="700""##;
            value_and_badge(out, bold_white, bold_white, "✕ FAIL");
        }
        CellStatus::Skip => {
            let _ = write!(
                out,
                r##"<rect x="{rx}" y="{ry}" width="{rw}" height="{rh}" fill="#ffffff" stroke="#888" stroke-dasharray="3 2"/>"##
            );
            text(
                out,
                cx,
                centred - 0.5,
                11.0,
                "middle",
                r##" fill="#666" font-style="italic""##,
                "skip",
            );
        }
        CellStatus::NotApplicable => {
            let _ = write!(
                out,
                r#"<rect x="{rx}" y="{ry}" width="{rw}" height="{rh}" fill="{NA_FILL}"/>"#
            );
            text(out, cx, centred, 12.0, "middle", r##" fill="#999""##, "—");
        }
    }
    out.push_str("</g>");
}

/// A small placeholder SVG: title plus a grey message.
fn empty_chart(title: &str, message: &str, width: f64) -> String {
    let width = width.max(24.0 + text_width(title, 15.0));
    let mut out = String::new();
    let aria = if title.is_empty() {
        message.to_string()
    } else {
        format!("{title}: {message}")
    };
    open_svg(&mut out, width, 64.0, &aria, title);
    text(
        &mut out,
        12.0,
        27.0,
        15.0,
        "start",
        r#" font-weight="600""#,
        title,
    );
    text(
        &mut out,
        12.0,
        50.0,
        12.0,
        "start",
        r##" fill="#666""##,
        message,
    );
    out.push_str("</svg>");
    out
}

// ---------------------------------------------------------------------------
// Line chart
// ---------------------------------------------------------------------------

/// One line of a chart. `dashed` series are meant for thresholds and floors:
/// they are drawn dashed and without point markers (unless they have a single
/// plottable point, which then gets a marker so it stays visible).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// An x/y line chart, e.g. bus bandwidth against message size.
///
/// With `x_log2` the x axis is log base 2 (ticks on powers of two); with
/// `y_log` the y axis is log base 10. A linear y axis always includes zero.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log2: bool,
    pub y_log: bool,
    pub series: Vec<Series>,
    pub x_format: AxisFormat,
}

/// Okabe–Ito colours (colour-blind safe), yellow left out for contrast on white.
const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#8c564b",
];

#[derive(Clone, Copy)]
enum Shape {
    Circle,
    Square,
    Triangle,
    Diamond,
}

const SHAPES: [Shape; 4] = [
    Shape::Circle,
    Shape::Square,
    Shape::Triangle,
    Shape::Diamond,
];

/// An axis in transformed space (log2/log10 applied): domain and ticks.
struct Axis {
    lo: f64,
    hi: f64,
    /// (position in transformed space, label)
    ticks: Vec<(f64, String)>,
}

impl Axis {
    fn frac(&self, t: f64) -> f64 {
        let span = self.hi - self.lo;
        if span.is_finite() && span > 0.0 {
            (t - self.lo) / span
        } else {
            0.5
        }
    }
}

fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Linear axis over [min, max] extended to whole tick steps. Byte axes step in
/// powers of two so ticks land on 1 KiB, 512 MiB and so on.
fn linear_axis(min: f64, max: f64, include_zero: bool, fmt: AxisFormat) -> Axis {
    let (mut lo, mut hi) = (min, max);
    if include_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(lo.abs()).max(1e-300) {
        if lo == 0.0 {
            hi = 1.0;
        } else {
            let d = lo.abs() * 0.1;
            lo -= d;
            hi += d;
        }
    }
    let span = hi - lo;
    if !span.is_finite() {
        return Axis {
            lo,
            hi,
            ticks: vec![(lo, fmt.format(lo)), (hi, fmt.format(hi))],
        };
    }
    let raw = span / 5.0;
    let step = match fmt {
        AxisFormat::Bytes => 2f64.powf(raw.log2().ceil()),
        AxisFormat::Number => nice_step(raw),
    };
    lo = (lo / step).floor() * step;
    hi = (hi / step).ceil() * step;
    let n = ((hi - lo) / step).round().clamp(1.0, 60.0) as usize;
    let ticks = (0..=n)
        .map(|i| {
            let v = lo + i as f64 * step;
            // Snap float noise (0.30000000000000004) and -0 before labelling.
            let v = if (v / step).round() == 0.0 { 0.0 } else { v };
            (v, fmt.format(v))
        })
        .collect();
    Axis { lo, hi, ticks }
}

/// Log2 axis: domain extended to whole powers of two, ticks on powers of two
/// at a stride that keeps at most about eight labels.
fn log2_axis(min: f64, max: f64, fmt: AxisFormat) -> Axis {
    let mut lo = min.floor();
    let mut hi = max.ceil();
    if hi - lo < 1.0 {
        lo -= 1.0;
        hi += 1.0;
    }
    let span = hi - lo;
    let stride = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
        .into_iter()
        .find(|s| span / s <= 8.0)
        .unwrap_or((span / 8.0).ceil());
    let mut ticks = Vec::new();
    let mut k = (lo / stride).ceil() * stride;
    while k <= hi && ticks.len() < 40 {
        ticks.push((k, fmt.format(2f64.powf(k))));
        k += stride;
    }
    Axis { lo, hi, ticks }
}

/// Log10 axis over the data range plus 5 % padding; ticks on 1/2/5×10^k for
/// narrow ranges, on powers of ten otherwise, and on plain nice steps when the
/// range is too narrow to contain two of those.
fn log10_axis(min: f64, max: f64, fmt: AxisFormat) -> Axis {
    let (mut lmin, mut lmax) = (min, max);
    if lmax - lmin < 1e-9 {
        lmin -= 0.5;
        lmax += 0.5;
    }
    let padding = (lmax - lmin) * 0.05;
    let (lo, hi) = (lmin - padding, lmax + padding);
    let decades = hi - lo;
    let mults: &[f64] = if decades <= 3.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let stride = if decades > 10.0 {
        (decades / 8.0).ceil() as i64
    } else {
        1
    };
    let mut ticks = Vec::new();
    let (k0, k1) = (lo.floor() as i64, hi.ceil() as i64);
    let mut k = k0;
    while k <= k1 && ticks.len() < 40 {
        if k.rem_euclid(stride) == 0 {
            for &m in mults {
                let v = m * 10f64.powi(k as i32);
                let l = v.log10();
                if l >= lo && l <= hi {
                    ticks.push((l, fmt.format(v)));
                }
            }
        }
        k += 1;
    }
    if ticks.len() < 2 {
        let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
        let step = nice_step((b - a) / 4.0);
        ticks.clear();
        let mut v = (a / step).ceil() * step;
        while v <= b && ticks.len() < 20 {
            if v > 0.0 {
                ticks.push((v.log10(), fmt.format(v)));
            }
            v += step;
        }
    }
    Axis { lo, hi, ticks }
}

fn marker(out: &mut String, shape: Shape, x: f64, y: f64, colour: &str, tip: &str) {
    let tip = escape(tip);
    let style = format!(r##"fill="{colour}" stroke="#ffffff" stroke-width="1""##);
    let _ = match shape {
        Shape::Circle => write!(
            out,
            r#"<circle class="pt" cx="{}" cy="{}" r="3.5" {style}><title>{tip}</title></circle>"#,
            num(x),
            num(y)
        ),
        Shape::Square => write!(
            out,
            r#"<rect class="pt" x="{}" y="{}" width="7" height="7" {style}><title>{tip}</title></rect>"#,
            num(x - 3.5),
            num(y - 3.5)
        ),
        Shape::Triangle => write!(
            out,
            r#"<path class="pt" d="M{} {}L{} {}L{} {}Z" {style}><title>{tip}</title></path>"#,
            num(x),
            num(y - 4.5),
            num(x + 4.5),
            num(y + 3.5),
            num(x - 4.5),
            num(y + 3.5)
        ),
        Shape::Diamond => write!(
            out,
            r#"<path class="pt" d="M{} {}L{} {}L{} {}L{} {}Z" {style}><title>{tip}</title></path>"#,
            num(x),
            num(y - 4.5),
            num(x + 4.5),
            num(y),
            num(x),
            num(y + 4.5),
            num(x - 4.5),
            num(y)
        ),
    };
}

/// Renders a line chart.
///
/// Points that cannot be drawn are skipped, never a panic: NaN or infinite
/// coordinates, and zero or negative values on a log axis. How many were
/// skipped is stated under the plot. Lines join the remaining points in x
/// order. Each solid series gets its own colour and marker shape, and every
/// marker carries a tooltip with its coordinates. When nothing is plottable the
/// chart shows its frame, "no data" and the legend.
pub fn line_chart(c: &LineChart) -> String {
    let tx = |x: f64| if c.x_log2 { x.log2() } else { x };
    let ty = |y: f64| if c.y_log { y.log10() } else { y };
    let plottable = |(x, y): (f64, f64)| {
        x.is_finite()
            && y.is_finite()
            && (!c.x_log2 || x > 0.0)
            && (!c.y_log || y > 0.0)
            && tx(x).is_finite()
            && ty(y).is_finite()
    };

    let mut omitted = 0usize;
    let series: Vec<Vec<(f64, f64)>> = c
        .series
        .iter()
        .map(|s| {
            let mut pts: Vec<(f64, f64)> =
                s.points.iter().copied().filter(|&p| plottable(p)).collect();
            omitted += s.points.len() - pts.len();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            pts
        })
        .collect();
    let all = series.iter().flatten();
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in all {
        let (x, y) = (tx(x), ty(y));
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    let has_data = xmin.is_finite();
    if !has_data {
        (xmin, xmax, ymin, ymax) = (0.0, 1.0, 0.0, 1.0);
    }

    let x_axis = if !has_data {
        Axis {
            lo: 0.0,
            hi: 1.0,
            ticks: Vec::new(),
        }
    } else if c.x_log2 {
        log2_axis(xmin, xmax, c.x_format)
    } else {
        linear_axis(xmin, xmax, false, c.x_format)
    };
    let y_axis = if !has_data {
        Axis {
            lo: 0.0,
            hi: 1.0,
            ticks: Vec::new(),
        }
    } else if c.y_log {
        log10_axis(ymin, ymax, AxisFormat::Number)
    } else {
        linear_axis(ymin, ymax, true, AxisFormat::Number)
    };

    // --- layout -----------------------------------------------------------
    let width = 600.0;
    let pad = 12.0;
    let tick_font = 12.0;
    let title_h = if c.title.is_empty() { 8.0 } else { 30.0 };
    let y_label_w = if c.y_label.is_empty() { 0.0 } else { 20.0 };
    let y_tick_w = y_axis
        .ticks
        .iter()
        .map(|(_, s)| text_width(s, tick_font))
        .fold(12.0, f64::max);
    let left = pad + y_label_w + y_tick_w + 8.0;
    let right = width - pad - 8.0;
    let top = pad + title_h + 6.0;
    let plot_h = 260.0;
    let bottom = top + plot_h;
    let inset = 8.0;
    let px = |t: f64| left + inset + x_axis.frac(t) * (right - left - 2.0 * inset);
    let py = |t: f64| bottom - y_axis.frac(t) * plot_h;

    let mut y_cursor = bottom + 18.0; // below x tick labels
    let x_label_y = if c.x_label.is_empty() {
        y_cursor
    } else {
        y_cursor += 20.0;
        y_cursor
    };
    let note = (omitted > 0).then(|| {
        format!(
            "{omitted} point{} not plotted (not a finite number{})",
            if omitted == 1 { "" } else { "s" },
            if c.x_log2 || c.y_log {
                ", or ≤ 0 on a log axis"
            } else {
                ""
            }
        )
    });
    let note_y = if note.is_some() {
        y_cursor += 18.0;
        y_cursor
    } else {
        y_cursor
    };
    let leg_font = 12.0;
    let widths: Vec<f64> = c
        .series
        .iter()
        .map(|s| 30.0 + text_width(&s.name, leg_font) + 18.0)
        .collect();
    let leg_y = y_cursor + 10.0;
    let (leg_pos, leg_h) = flow(&widths, pad, leg_y, width - 2.0 * pad, 20.0);
    let height = leg_y + leg_h + pad - 4.0;

    // --- output -----------------------------------------------------------
    let mut aria = format!(
        "{}: line chart of {} series, x: {}, y: {}",
        c.title,
        c.series.len(),
        c.x_label,
        c.y_label
    );
    if !has_data {
        aria.push_str(", no data");
    }
    let mut out = String::with_capacity(4096);
    open_svg(&mut out, width, height, &aria, &c.title);
    if !c.title.is_empty() {
        text(
            &mut out,
            pad,
            pad + 15.0,
            15.0,
            "start",
            r#" font-weight="600""#,
            &c.title,
        );
    }
    // Grid and ticks.
    out.push_str(r##"<g stroke="#e2e2e2" stroke-width="1">"##);
    for (t, _) in &x_axis.ticks {
        let x = num(px(*t));
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
            num(top),
            num(bottom)
        );
    }
    for (t, _) in &y_axis.ticks {
        let y = num(py(*t));
        let _ = write!(
            out,
            r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/>"#,
            num(left),
            num(right)
        );
    }
    out.push_str("</g>");
    let _ = write!(
        out,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888" stroke-width="1"/>"##,
        num(left),
        num(top),
        num(right - left),
        num(plot_h)
    );
    out.push_str(r##"<g fill="#333">"##);
    for (t, label) in &x_axis.ticks {
        text(
            &mut out,
            px(*t),
            bottom + 15.0,
            tick_font,
            "middle",
            "",
            label,
        );
    }
    for (t, label) in &y_axis.ticks {
        text(
            &mut out,
            left - 5.0,
            py(*t) + 4.0,
            tick_font,
            "end",
            "",
            label,
        );
    }
    out.push_str("</g>");
    axis_titles(
        &mut out,
        12.0,
        "#222",
        (&c.x_label, (left + right) / 2.0, x_label_y),
        (&c.y_label, pad + 10.0, top + plot_h / 2.0),
    );
    if !has_data {
        text(
            &mut out,
            (left + right) / 2.0,
            top + plot_h / 2.0,
            14.0,
            "middle",
            r##" fill="#777""##,
            "no data",
        );
    }

    // Series: lines first, markers on top.
    let mut solid_idx = 0usize;
    let styles: Vec<(&str, Shape)> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let shape = SHAPES[solid_idx % SHAPES.len()];
            if !s.dashed {
                solid_idx += 1;
            }
            (PALETTE[i % PALETTE.len()], shape)
        })
        .collect();
    for (s, (pts, (colour, _))) in c.series.iter().zip(series.iter().zip(&styles)) {
        if pts.len() < 2 {
            continue;
        }
        let coords: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{},{}", num(px(tx(x))), num(py(ty(y)))))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="7 4""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" stroke-linejoin="round"{dash} points="{}"><title>{}</title></polyline>"#,
            coords.join(" "),
            escape(&s.name)
        );
    }
    for (s, (pts, (colour, shape))) in c.series.iter().zip(series.iter().zip(&styles)) {
        if s.dashed && pts.len() != 1 {
            continue;
        }
        for &(x, y) in pts {
            let tip = format!(
                "{}: x = {}, y = {}",
                s.name,
                c.x_format.format(x),
                format_number(y)
            );
            marker(&mut out, *shape, px(tx(x)), py(ty(y)), colour, &tip);
        }
    }

    if let Some(note) = &note {
        text(
            &mut out,
            left,
            note_y,
            11.0,
            "start",
            r##" fill="#666""##,
            note,
        );
    }
    for (s, ((colour, shape), (x, y))) in c.series.iter().zip(styles.iter().zip(leg_pos)) {
        let mid = y + 10.0;
        let dash = if s.dashed {
            r#" stroke-dasharray="7 4""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<line x1="{}" y1="{m}" x2="{}" y2="{m}" stroke="{colour}" stroke-width="2"{dash}/>"#,
            num(x),
            num(x + 24.0),
            m = num(mid)
        );
        if !s.dashed {
            // Same shape as on the plot, but not counted as a data point.
            let mut m = String::new();
            marker(&mut m, *shape, x + 12.0, mid, colour, &s.name);
            out.push_str(&m.replace(r#" class="pt""#, ""));
        }
        text(
            &mut out,
            x + 30.0,
            mid + 4.0,
            leg_font,
            "start",
            r##" fill="#222""##,
            &s.name,
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minimal XML well-formedness check: one root element, every opened tag
    /// closed in order, quotes balanced inside tags, no raw `<` in attribute
    /// text, and every `&` starts a known entity.
    fn check_xml(s: &str) -> Result<(), String> {
        fn check_entities(t: &str) -> Result<(), String> {
            let mut rest = t;
            while let Some(p) = rest.find('&') {
                let after = &rest[p + 1..];
                let end = after.find(';').ok_or_else(|| format!("bare & in {t:?}"))?;
                let ent = &after[..end];
                let ok = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
                    || ent
                        .strip_prefix('#')
                        .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
                if !ok {
                    return Err(format!("bad entity &{ent}; in {t:?}"));
                }
                rest = &after[end + 1..];
            }
            Ok(())
        }
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = s;
        loop {
            let Some(p) = rest.find('<') else {
                check_entities(rest)?;
                if !rest.trim().is_empty() {
                    return Err(format!("text after root: {rest:?}"));
                }
                break;
            };
            let txt = &rest[..p];
            check_entities(txt)?;
            if txt.contains('>') {
                return Err(format!("raw > in text {txt:?}"));
            }
            if stack.is_empty() && !txt.trim().is_empty() {
                return Err(format!("text outside root: {txt:?}"));
            }
            let after = &rest[p + 1..];
            let end = after.find('>').ok_or("unterminated tag")?;
            let tag = &after[..end];
            rest = &after[end + 1..];
            if tag.contains('<') {
                return Err(format!("< inside tag {tag:?}"));
            }
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open) if open == name.trim() => continue,
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
            }
            if tag.matches('"').count() % 2 != 0 {
                return Err(format!("unbalanced quotes in {tag:?}"));
            }
            check_entities(tag)?;
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            if name.is_empty() {
                return Err(format!("tag without name: {tag:?}"));
            }
            if stack.is_empty() {
                roots += 1;
                if roots > 1 {
                    return Err("more than one root".into());
                }
            }
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed: {stack:?}"));
        }
        if roots != 1 {
            return Err("no root element".into());
        }
        Ok(())
    }

    /// Every decimal number in `s` has at most two decimals, and no NaN/inf.
    fn check_numbers(s: &str) -> Result<(), String> {
        if s.contains("NaN") || s.contains("inf") {
            return Err("non-finite number in output".into());
        }
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'.' && i > 0 && b[i - 1].is_ascii_digit() {
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                if j - i - 1 > 2 {
                    let from = i.saturating_sub(10);
                    return Err(format!("too many decimals near {:?}", &s[from..j]));
                }
                i = j;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    fn assert_svg(s: &str) {
        assert!(
            s.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{s}"
        );
        assert!(s.ends_with("</svg>"));
        assert!(s.contains("viewBox=\"0 0 "));
        assert!(s.contains("width=\"100%\""));
        assert!(s.contains("role=\"img\" aria-label=\""));
        assert!(!s.contains("<script"));
        assert!(!s.contains("href"), "no external references");
        check_xml(s).unwrap_or_else(|e| panic!("not well-formed: {e}\n{s}"));
        check_numbers(s).unwrap_or_else(|e| panic!("{e}\n{s}"));
    }

    fn gpu_heatmap(n: usize, fail: Option<(usize, usize)>) -> Heatmap {
        let labels: Vec<String> = (0..n).map(|i| format!("GPU{i}")).collect();
        let cells = (0..n)
            .map(|r| {
                (0..n)
                    .map(|c| {
                        if r == c {
                            HeatCell {
                                status: CellStatus::NotApplicable,
                                ..Default::default()
                            }
                        } else if fail == Some((r, c)) {
                            HeatCell {
                                value: Some(12.25),
                                expected: Some(390.0),
                                status: CellStatus::Fail,
                                note: Some("link degraded".into()),
                            }
                        } else {
                            HeatCell {
                                value: Some(380.0 + (r * n + c) as f64 * 0.5),
                                expected: Some(390.0),
                                status: CellStatus::Pass,
                                note: None,
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        Heatmap {
            title: "P2P bandwidth".into(),
            unit: "GB/s".into(),
            row_labels: labels.clone(),
            col_labels: labels,
            cells,
            row_axis: "source".into(),
            col_axis: "destination".into(),
        }
    }

    #[test]
    fn checker_rejects_broken_markup() {
        assert!(check_xml("<svg><g></g></svg>").is_ok());
        assert!(check_xml("<svg><g></svg>").is_err());
        assert!(check_xml("<svg><g/></svg><svg/>").is_err());
        assert!(check_xml("<svg>a & b</svg>").is_err());
        assert!(check_xml("<svg>a < b</svg>").is_err());
        assert!(check_xml(r#"<svg a="x"y"/>"#).is_err());
        assert!(check_numbers("x=\"1.234\"").is_err());
        assert!(check_numbers("x=\"NaN\"").is_err());
        assert!(check_numbers("x=\"1.23\" 1.5").is_ok());
    }

    #[test]
    fn number_formats() {
        assert_eq!(num(1.23456), "1.23");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(f64::NAN), "0");
        assert_eq!(num(f64::INFINITY), "0");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(1024.0), "1 KiB");
        assert_eq!(format_bytes(1536.0), "1.5 KiB");
        assert_eq!(format_bytes(1048576.0), "1 MiB");
        assert_eq!(format_bytes(1073741824.0), "1 GiB");
        assert_eq!(format_bytes(f64::NAN), "");
        assert_eq!(format_number(65536.0), "65536");
        assert_eq!(format_number(2_500_000.0), "2.5M");
        assert_eq!(format_number(0.001), "1e-3");
        assert_eq!(format_number(0.0015), "1.5e-3");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(fmt_value(391.2), "391");
        assert_eq!(fmt_value(45.25), "45.2");
        assert_eq!(fmt_value(4.56789), "4.57");
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"
        );
    }

    #[test]
    fn hidden_characters_in_a_label_are_shown_not_obeyed() {
        // A bidi override would show the tooltip reversed; a line break or an ESC would reach
        // it raw (XML allows both).
        assert_eq!(
            escape("GPU\u{202e}1 <\u{2066}>\n\u{1b}[2K\t\u{200b}"),
            "GPU\\u{202e}1 &lt;\\u{2066}&gt;\\n\\u{1b}[2K\\t\\u{200b}"
        );
        let mut h = gpu_heatmap(2, Some((0, 1)));
        h.row_labels[0] = "GPU\u{202e}0".into();
        h.cells[0][1].note = Some("slow\u{2067}\r\nPASS".into());
        let s = heatmap(&h);
        assert_svg(&s);
        for hidden in ['\u{202e}', '\u{2067}', '\r'] {
            assert!(!s.contains(hidden), "{hidden:?} in {s}");
        }
        assert!(
            s.contains("GPU\\u{202e}0") && s.contains("slow\\u{2067}\\r\\nPASS"),
            "{s}"
        );
    }

    #[test]
    fn heatmap_8x8_has_all_cells_and_marks_the_failure() {
        let s = heatmap(&gpu_heatmap(8, Some((2, 5))));
        assert_svg(&s);
        assert_eq!(s.matches("<g class=\"cell ").count(), 64);
        assert_eq!(s.matches("<g class=\"cell na\"").count(), 8);
        assert_eq!(s.matches("<g class=\"cell fail\"").count(), 1);
        assert_eq!(s.matches("<g class=\"cell pass\"").count(), 55);
        assert_eq!(s.matches("✕ FAIL</text>").count(), 1);
        // The fail cell's group holds the mark, the thick outline, the hatch and the value.
        let fail = s.split("<g class=\"cell fail\">").nth(1).unwrap();
        let fail = &fail[..fail.find("</g>").unwrap()];
        assert!(
            fail.contains(
                "GPU2 → GPU5: 12.2 GB/s (expected 390 GB/s, 3.14%) — FAIL: link degraded"
            ),
            "{fail}"
        );
        assert!(fail.contains("stroke-width=\"3\""));
        assert!(fail.contains("-hatch)"));
        assert!(fail.contains(">12.2</text>"));
        assert!(s.contains(">380</text>"), "values printed in cells");
        assert!(s.contains("1 failing"));
    }

    #[test]
    fn heatmap_without_failures_has_no_fail_mark() {
        let s = heatmap(&gpu_heatmap(4, None));
        assert_svg(&s);
        assert_eq!(s.matches("✕ FAIL").count(), 0);
        assert_eq!(s.matches("<g class=\"cell fail\"").count(), 0);
    }

    #[test]
    fn heatmap_1x1_and_0x0() {
        let one = Heatmap {
            title: "one".into(),
            row_labels: vec!["GPU0".into()],
            col_labels: vec!["GPU0".into()],
            cells: vec![vec![HeatCell {
                value: Some(5.0),
                ..Default::default()
            }]],
            ..Default::default()
        };
        let s = heatmap(&one);
        assert_svg(&s);
        assert_eq!(s.matches("<g class=\"cell ").count(), 1);
        assert!(s.contains(">5</text>"));

        let s = heatmap(&Heatmap {
            title: "nothing".into(),
            ..Default::default()
        });
        assert_svg(&s);
        assert!(s.contains("no pairs"));
        assert!(!s.contains("class=\"cell"));
    }

    #[test]
    fn heatmap_ragged_and_non_finite_input() {
        let h = Heatmap {
            title: "ragged".into(),
            row_labels: vec!["a".into(), "b".into()],
            col_labels: vec!["x".into()],
            cells: vec![
                vec![
                    HeatCell {
                        value: Some(f64::NAN),
                        expected: Some(f64::INFINITY),
                        status: CellStatus::Warn,
                        note: None,
                    },
                    HeatCell {
                        value: Some(f64::INFINITY),
                        expected: Some(0.0),
                        status: CellStatus::Fail,
                        note: None,
                    },
                ],
                vec![],
                vec![HeatCell {
                    value: Some(1e300),
                    expected: Some(1e-300),
                    status: CellStatus::Skip,
                    note: None,
                }],
            ],
            ..Default::default()
        };
        let s = heatmap(&h);
        assert_svg(&s);
        // 3 rows (cells has 3) x 2 columns (widest row).
        assert_eq!(s.matches("<g class=\"cell ").count(), 6);
    }

    #[test]
    fn labels_are_escaped() {
        let evil = r#"<b>&"x"#;
        let mut h = gpu_heatmap(2, Some((0, 1)));
        h.title = evil.into();
        h.unit = evil.into();
        h.row_labels[0] = evil.into();
        h.col_labels[1] = evil.into();
        h.row_axis = evil.into();
        h.col_axis = evil.into();
        h.cells[0][1].note = Some(evil.into());
        let s = heatmap(&h);
        assert_svg(&s);
        assert!(!s.contains("<b>"));
        assert!(s.contains("&lt;b&gt;&amp;&quot;x"));

        let c = LineChart {
            title: evil.into(),
            x_label: evil.into(),
            y_label: evil.into(),
            series: vec![Series {
                name: evil.into(),
                points: vec![(1.0, 2.0), (2.0, 3.0)],
                dashed: false,
            }],
            ..Default::default()
        };
        let s = line_chart(&c);
        assert_svg(&s);
        assert!(!s.contains("<b>"));
        assert!(s.contains("&lt;b&gt;&amp;&quot;x"));
    }

    fn sweep() -> LineChart {
        let sizes: Vec<f64> = (3..=30).map(|k| 2f64.powi(k)).collect();
        LineChart {
            title: "all_reduce bus bandwidth".into(),
            x_label: "message size".into(),
            y_label: "busbw (GB/s)".into(),
            x_log2: true,
            y_log: false,
            x_format: AxisFormat::Bytes,
            series: vec![
                Series {
                    name: "8 GPUs".into(),
                    points: sizes.iter().map(|&s| (s, 400.0 * s / (s + 4e6))).collect(),
                    dashed: false,
                },
                Series {
                    name: "floor".into(),
                    points: vec![(8.0, 300.0), (2f64.powi(30), 300.0)],
                    dashed: true,
                },
            ],
        }
    }

    #[test]
    fn line_chart_points_ticks_and_legend() {
        let s = line_chart(&sweep());
        assert_svg(&s);
        assert_eq!(
            s.matches("class=\"pt\"").count(),
            28,
            "markers on solid series only"
        );
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(
            s.matches("stroke-dasharray=\"7 4\"").count(),
            2,
            "dashed line + legend"
        );
        for tick in [">1 KiB<", ">1 MiB<", ">1 GiB<", ">32 KiB<"] {
            assert!(s.contains(tick), "missing tick {tick}");
        }
        assert!(s.contains(">8 GPUs</text>") && s.contains(">floor</text>"));
        assert!(!s.contains("not plotted"));
    }

    #[test]
    fn line_chart_skips_non_finite_and_non_positive_on_log_axes() {
        let c = LineChart {
            title: "latency".into(),
            x_log2: true,
            y_log: true,
            series: vec![Series {
                name: "a".into(),
                points: vec![
                    (0.0, 1.0),
                    (-4.0, 1.0),
                    (4.0, 0.0),
                    (8.0, -3.0),
                    (f64::NAN, 1.0),
                    (16.0, f64::INFINITY),
                    (32.0, 10.0),
                    (64.0, 12.0),
                    (128.0, 1e-5),
                ],
                dashed: false,
            }],
            ..Default::default()
        };
        let s = line_chart(&c);
        assert_svg(&s);
        assert_eq!(s.matches("class=\"pt\"").count(), 3);
        assert!(s.contains("6 points not plotted"));

        // Linear axes: only the non-finite ones go.
        let mut lin = c.clone();
        lin.x_log2 = false;
        lin.y_log = false;
        let s = line_chart(&lin);
        assert_svg(&s);
        assert_eq!(s.matches("class=\"pt\"").count(), 7);
        assert!(s.contains("2 points not plotted"));
    }

    #[test]
    fn line_chart_empty_single_and_flat() {
        let s = line_chart(&LineChart::default());
        assert_svg(&s);
        assert!(s.contains("no data"));

        let zeros = LineChart {
            title: "zeros on log".into(),
            y_log: true,
            x_log2: true,
            series: vec![
                Series {
                    name: "z".into(),
                    points: vec![(0.0, 0.0), (0.0, 0.0)],
                    dashed: false,
                },
                Series::default(),
            ],
            ..Default::default()
        };
        let s = line_chart(&zeros);
        assert_svg(&s);
        assert!(s.contains("no data"));
        assert_eq!(s.matches("class=\"pt\"").count(), 0);

        for (x_log2, y_log) in [(false, false), (true, true), (true, false), (false, true)] {
            let single = LineChart {
                x_log2,
                y_log,
                series: vec![
                    Series {
                        name: "one".into(),
                        points: vec![(1024.0, 50.0)],
                        dashed: false,
                    },
                    Series {
                        name: "flat threshold".into(),
                        points: vec![(1024.0, 50.0)],
                        dashed: true,
                    },
                ],
                ..Default::default()
            };
            let s = line_chart(&single);
            assert_svg(&s);
            assert_eq!(s.matches("class=\"pt\"").count(), 2);
            assert_eq!(s.matches("<polyline").count(), 0);
        }

        // Extreme but finite values must not produce non-finite output.
        let extreme = LineChart {
            series: vec![Series {
                name: "x".into(),
                points: vec![(-1e308, -1e308), (1e308, 1e308), (1e-300, 1e-300)],
                dashed: false,
            }],
            ..Default::default()
        };
        let s = line_chart(&extreme);
        assert_svg(&s);
    }

    #[test]
    fn output_is_deterministic() {
        assert_eq!(line_chart(&sweep()), line_chart(&sweep()));
        let h = gpu_heatmap(8, Some((1, 2)));
        assert_eq!(heatmap(&h), heatmap(&h));
    }
}
