//! Rendering: evidence in, HTML and Markdown out, through minijinja templates that are embedded
//! in the binary and can be overridden with `--templates DIR`. Nothing here touches hardware;
//! everything shown is derived from the evidence alone.

pub mod svg;
pub mod view;

use crate::evidence::Evidence;
use minijinja::value::Serde;
use minijinja::{Environment, Value};
use std::path::Path;

pub const HTML_TEMPLATE: &str = "report.html.j2";
pub const MD_TEMPLATE: &str = "report.md.j2";
const EMBEDDED_HTML: &str = include_str!("../../templates/report.html.j2");
const EMBEDDED_MD: &str = include_str!("../../templates/report.md.j2");
pub const DIFF_HTML_TEMPLATE: &str = "diff.html.j2";
pub const DIFF_MD_TEMPLATE: &str = "diff.md.j2";
const EMBEDDED_DIFF_HTML: &str = include_str!("../../templates/diff.html.j2");
const EMBEDDED_DIFF_MD: &str = include_str!("../../templates/diff.md.j2");

/// The rendered pages.
pub struct Rendered {
    pub html: String,
    pub markdown: String,
}

/// Extra facts about the certificate that are not part of the evidence (the signature).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Signing {
    /// SHA-256 fingerprint of the signer's key, as ssh-keygen prints it.
    pub fingerprint: Option<String>,
    /// SHA-256 of evidence.json.
    pub evidence_sha256: Option<String>,
    /// The exact command to verify with stock OpenSSH.
    pub verify_command: Option<String>,
    /// Set when the signer signed a run that did not finish or judged nothing, explicitly
    /// (`--allow-incomplete`): "signed as incomplete". The title says it.
    pub signed_as: Option<String>,
}

/// The environment every page shares: autoescaping by name, strict undefined, filters.
fn base_env() -> Environment<'static> {
    let mut env = Environment::new();
    // HTML is escaped; Markdown is not.
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".html.j2") || name.ends_with(".html") {
            minijinja::AutoEscape::Html
        } else {
            minijinja::AutoEscape::None
        }
    });
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env.add_filter("md", |v: String| md_text(&v));
    env.add_filter("md_code", |v: String| md_code(&v));
    env.add_filter("num", |v: f64| crate::checks::judge::fmt_num(v));
    env.add_filter("bytes", |v: u64| crate::units::format_bytes(v));
    env.add_filter("pct", |v: f64| format!("{:.1}%", v * 100.0));
    env
}

/// A string from the node, the suite or the evidence as Markdown text: control characters
/// shown as escapes (a line break cannot start a heading or a table row), and the characters
/// that make tables, links, HTML tags, code or emphasis escaped.
pub fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let text = crate::console::visible(s);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' | '|' | '`' | '[' | ']' | '*' => {
                out.push('\\');
                out.push(c);
            }
            // Only what would open an HTML tag: "GPU 1 <-> GPU 2" stays as it is.
            '<' if chars
                .peek()
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')) =>
            {
                out.push_str("&lt;")
            }
            _ => out.push(c),
        }
    }
    out
}

/// A string from the node, the suite or the evidence inside a Markdown code span: control
/// characters shown as escapes, and no backtick to end the span.
pub fn md_code(s: &str) -> String {
    crate::console::visible(s).replace('`', "'")
}

fn env(templates: Option<&Path>) -> Result<Environment<'static>, String> {
    let mut env = base_env();
    let mut html = EMBEDDED_HTML.to_string();
    let mut md = EMBEDDED_MD.to_string();
    if let Some(dir) = templates {
        if !dir.is_dir() {
            return Err(format!("--templates {}: not a folder", dir.display()));
        }
        let mut found = false;
        for (name, slot) in [(HTML_TEMPLATE, &mut html), (MD_TEMPLATE, &mut md)] {
            let p = dir.join(name);
            if p.exists() {
                *slot = crate::fsio::read::read_to_string(&p, crate::fsio::read::Kind::Template)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                found = true;
            }
        }
        if !found {
            return Err(format!(
                "--templates {}: neither {HTML_TEMPLATE} nor {MD_TEMPLATE} found there",
                dir.display()
            ));
        }
    }
    env.add_template_owned(HTML_TEMPLATE, html)
        .map_err(|e| template_error(&e))?;
    env.add_template_owned(MD_TEMPLATE, md)
        .map_err(|e| template_error(&e))?;
    Ok(env)
}

fn template_error(e: &minijinja::Error) -> String {
    let mut s = format!("template error: {e}");
    if let (Some(name), Some(line)) = (e.name(), e.line()) {
        s = format!("{name}:{line}: {}", e.detail().unwrap_or(&e.to_string()));
    }
    s
}

/// Render both pages from evidence.
pub fn render(
    ev: &Evidence,
    templates: Option<&Path>,
    signing: &Signing,
) -> Result<Rendered, String> {
    let env = env(templates)?;
    let mut v = view::build(ev);
    if let Some(s) = &signing.signed_as {
        v.verdict = match v.verdict.strip_suffix(')') {
            Some(head) if v.simulated => format!("{head}; {s})"),
            _ => format!("{} ({s})", v.verdict),
        };
    }
    let ctx = minijinja::context! {
        ev => Value::from(Serde(ev)),
        v => Value::from(Serde(&v)),
        signing => Value::from(Serde(signing)),
    };
    let html = env
        .get_template(HTML_TEMPLATE)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| template_error(&e))?;
    let markdown = env
        .get_template(MD_TEMPLATE)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| template_error(&e))?;
    Ok(Rendered { html, markdown })
}

/// Render the comparison of two runs (`nodecert diff`) as HTML and Markdown.
pub fn render_diff(d: &crate::diff::Diff) -> Result<Rendered, String> {
    let mut env = base_env();
    env.add_template(DIFF_HTML_TEMPLATE, EMBEDDED_DIFF_HTML)
        .map_err(|e| template_error(&e))?;
    env.add_template(DIFF_MD_TEMPLATE, EMBEDDED_DIFF_MD)
        .map_err(|e| template_error(&e))?;
    let ctx = minijinja::context! { d => Value::from(Serde(d)) };
    let page = |name: &str| {
        env.get_template(name)
            .and_then(|t| t.render(&ctx))
            .map_err(|e| template_error(&e))
    };
    Ok(Rendered {
        html: page(DIFF_HTML_TEMPLATE)?,
        markdown: page(DIFF_MD_TEMPLATE)?,
    })
}
