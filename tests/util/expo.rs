//! A strict checker for the Prometheus text exposition format (0.0.4), written from the spec
//! (prometheus.io/docs/instrumenting/exposition_formats): every line is a `# HELP`, a `# TYPE`,
//! another comment, or a sample `name{label="value",...} value`; names match
//! `[a-zA-Z_:][a-zA-Z0-9_:]*`, label names `[a-zA-Z_][a-zA-Z0-9_]*` (not starting `__`), label
//! values escape only `\\`, `\"` and `\n`; values are floats (`NaN`, `+Inf`, `-Inf` allowed).
//! Beyond the grammar it enforces what scrapers rely on: HELP and TYPE at most once per family
//! and before its samples, a family's samples together, no duplicate series, a final newline.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};

/// One parsed sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_alphabetic() || x == '_' || x == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_alphabetic() || x == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !s.starts_with("__")
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => {
            // Go's ParseFloat grammar, without hex floats and without the words Rust accepts.
            let ok = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
                && s.chars().any(|c| c.is_ascii_digit());
            if ok {
                s.parse().ok()
            } else {
                None
            }
        }
    }
}

/// Labels between braces; returns the map and the rest of the line after `}`.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without '='")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape in label value: {other:?}")),
                },
                Some((_, '\n')) => return Err("raw newline in label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
            if rest.starts_with('}') {
                // A trailing comma is allowed by the spec.
                continue;
            }
        } else if !rest.starts_with('}') {
            return Err("expected ',' or '}' after a label".into());
        }
    }
}

const TYPES: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];

/// Check a whole exposition; returns its samples or every problem, each with its line number.
pub fn check(text: &str) -> Result<Vec<Sample>, Vec<String>> {
    let mut errors = Vec::new();
    let mut samples = Vec::new();
    if !text.is_empty() && !text.ends_with('\n') {
        errors.push("the last line does not end with a line feed".to_string());
    }
    let mut helped: HashSet<String> = HashSet::new();
    let mut typed: HashSet<String> = HashSet::new();
    let mut sampled: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut series: HashSet<String> = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let mut bad = |m: String| errors.push(format!("line {n}: {m}: {line:?}"));
        if line.contains('\r') {
            bad("carriage return".into());
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let words: Vec<&str> = c.trim_start().splitn(3, ' ').collect();
            match words.first().copied() {
                Some("HELP") | Some("TYPE") => {
                    let kind = words[0];
                    let Some(name) = words.get(1) else {
                        bad(format!("{kind} without a metric name"));
                        continue;
                    };
                    if !is_metric_name(name) {
                        bad(format!("bad metric name in {kind}"));
                    }
                    if sampled.contains(*name) {
                        bad(format!("{kind} after samples of {name}"));
                    }
                    let seen = if kind == "HELP" {
                        &mut helped
                    } else {
                        &mut typed
                    };
                    if !seen.insert(name.to_string()) {
                        bad(format!("second {kind} for {name}"));
                    }
                    if kind == "TYPE" {
                        match words.get(2) {
                            Some(t) if TYPES.contains(t) => {}
                            _ => bad("unknown type".into()),
                        }
                    } else if let Some(h) = words.get(2) {
                        let mut it = h.chars();
                        while let Some(ch) = it.next() {
                            if ch == '\\' && !matches!(it.next(), Some('\\' | 'n')) {
                                bad("bad escape in HELP".into());
                            }
                        }
                    }
                    current = Some(name.to_string());
                }
                _ => {}
            }
            continue;
        }
        // A sample.
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if !is_metric_name(name) {
            bad("bad metric name".into());
            continue;
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            match parse_labels(&line[name_end + 1..]) {
                Ok(x) => x,
                Err(e) => {
                    bad(e);
                    continue;
                }
            }
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let Some(rest) = rest.strip_prefix(' ') else {
            bad("no space before the value".into());
            continue;
        };
        let parts: Vec<&str> = rest.split(' ').collect();
        if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
            bad("expected a value and at most a timestamp".into());
            continue;
        }
        let Some(value) = parse_value(parts[0]) else {
            bad("value is not a float".into());
            continue;
        };
        if let Some(ts) = parts.get(1) {
            if ts.parse::<i64>().is_err() {
                bad("timestamp is not an integer".into());
            }
        }
        if !typed.contains(name) {
            bad("sample before its TYPE".into());
        }
        if current.as_deref() != Some(name) {
            if sampled.contains(name) {
                bad("samples of one family are not together".into());
            }
            current = Some(name.to_string());
        }
        sampled.insert(name.to_string());
        let key = format!("{name}{labels:?}");
        if !series.insert(key) {
            bad("duplicate series".into());
        }
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    if errors.is_empty() {
        Ok(samples)
    } else {
        Err(errors)
    }
}
