//! Rendering: evidence in, HTML and Markdown out, through minijinja templates that are embedded
//! in the binary and can be overridden with `--templates DIR`. Nothing here touches hardware;
//! everything shown is derived from the evidence alone.

pub mod conventions;
pub mod partitions;
pub mod remeasured;
pub mod svg;
pub mod view;

use crate::evidence::Evidence;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, Output, State, Value};
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
#[derive(Debug)]
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

/// The name of the auto-escape mode of Markdown pages (`*.md.j2`, `*.md`).
const MARKDOWN: &str = "markdown";

/// Whether the template being rendered escapes for Markdown.
fn in_markdown(state: &State) -> bool {
    matches!(state.auto_escape(), AutoEscape::Custom(name) if name == MARKDOWN)
}

/// The environment every page shares: autoescaping by name, strict undefined, filters.
///
/// Both kinds of page escape what they print unless it is marked safe: HTML pages with
/// minijinja's HTML escaping, Markdown pages with [`md_text`] (see [`format_value`]). A value
/// meant as markup must say so (`| safe`); one that the template forgets to escape is escaped
/// anyway.
pub(crate) fn base_env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".html.j2") || name.ends_with(".html") {
            AutoEscape::Html
        } else if name.ends_with(".md.j2") || name.ends_with(".md") {
            AutoEscape::Custom(MARKDOWN.into())
        } else {
            AutoEscape::None
        }
    });
    env.set_formatter(format_value);
    // A field printed or looped over must be there; one only tested (`{% if ev.simulation %}`)
    // may be absent, as optional fields are in evidence written without them (an older
    // version, a hand-edited file): such evidence renders instead of failing as the embedded
    // templates' error (found by fuzzing, fuzz/fuzz_targets/evidence.rs).
    env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
    // Errors point at their place (line and byte range), in release builds too.
    env.set_debug(true);
    env.set_fuel(Some(FUEL));
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    // Markdown made by these filters is marked safe on a Markdown page only: on an HTML page
    // it is a plain string, which HTML escaping still escapes.
    let markup = |state: &State, text: String| match in_markdown(state) {
        true => Value::from_safe_string(text),
        false => Value::from(text),
    };
    env.add_filter("md", move |state: &State, v: String| {
        markup(state, md_text(&v))
    });
    env.add_filter("md_code", move |state: &State, v: String| {
        markup(state, md_code(&v))
    });
    env.add_filter("md_cell_code", move |state: &State, v: String| {
        markup(state, md_cell_code(&v))
    });
    env.add_filter("num", |v: f64| crate::checks::judge::fmt_num(v));
    env.add_filter("bytes", |v: u64| crate::units::format_bytes(v));
    env.add_filter("pct", |v: f64| format!("{:.1}%", v * 100.0));
    env
}

/// How a page prints a value. On a Markdown page: a safe string (the output of `md`, `safe`,
/// a macro) as it is, nothing, none, a boolean or a number as minijinja writes it, and any
/// other value as [`md_text`] of its text. On an HTML page: a value that is not safe first
/// through [`crate::console::visible`] (a bidi override or a control character is shown, not
/// obeyed), then HTML-escaped. Other modes are minijinja's own.
fn format_value(
    out: &mut Output,
    state: &mut State,
    value: &Value,
) -> Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    let plain = matches!(
        value.kind(),
        ValueKind::Undefined | ValueKind::None | ValueKind::Bool | ValueKind::Number
    );
    if value.is_safe() || plain {
        return match in_markdown(state) {
            true => write!(out, "{value}").map_err(minijinja::Error::from),
            false => minijinja::escape_formatter(out, state, value),
        };
    }
    match state.auto_escape() {
        AutoEscape::Custom(name) if name == MARKDOWN => out
            .write_str(&md_text(&value.to_string()))
            .map_err(minijinja::Error::from),
        AutoEscape::Html => {
            let shown = Value::from(crate::console::visible(&value.to_string()));
            minijinja::escape_formatter(out, state, &shown)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// A string from the node, the suite or the evidence as Markdown text: control characters
/// shown as escapes (a line break cannot start a heading or a table row), the characters
/// that make tables, links, HTML tags, character references, code, emphasis or strikethrough
/// escaped, GFM's `www.` and `scheme://` autolinks broken, and a `#` or `>` that starts
/// it (after any spaces) escaped, so that placed at the start of a line it cannot make a
/// heading or a quote.
pub fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let text = crate::console::visible(s);
    // A heading's `#` or a quote's `>` may follow up to three spaces (after more, the escape
    // does no harm).
    let rest = text.trim_start_matches(' ');
    out.push_str(&text[..text.len() - rest.len()]);
    if rest.starts_with(['#', '>']) {
        out.push('\\');
    }
    let mut chars = rest.chars().peekable();
    let mut prev: Option<char> = None;
    while let Some(c) = chars.next() {
        match c {
            // `&` too: "&#x202E;" would otherwise be decoded into the very mark `visible` showed;
            // `~` makes strikethrough.
            '\\' | '|' | '`' | '[' | ']' | '*' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            // `_` makes emphasis only at a word's edge: "all_reduce" stays as it is.
            '_' if !(prev.is_some_and(char::is_alphanumeric)
                && chars.peek().is_some_and(|n| n.is_alphanumeric())) =>
            {
                out.push_str("\\_");
            }
            // GitHub's extended autolinks: a node that calls itself "www.example.com" or
            // puts "https://..." in a string does not get a link in a signed certificate.
            // (An e-mail address still becomes a `mailto:` link: no escape stops GFM's.)
            ':' if chars.clone().take(2).eq(['/', '/']) => out.push_str("\\:"),
            '.' if out.ends_with("www") => out.push_str("\\."),
            // Only what would open an HTML tag: "GPU 1 <-> GPU 2" stays as it is.
            '<' if chars
                .peek()
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')) =>
            {
                out.push_str("&lt;")
            }
            _ => out.push(c),
        }
        prev = Some(c);
    }
    out
}

/// A string from the node, the suite or the evidence inside a Markdown code span: control
/// characters shown as escapes, and no backtick to end the span. Backslashes are literal in a
/// code span, so nothing else is escaped; inside a table cell use [`md_cell_code`].
pub fn md_code(s: &str) -> String {
    crate::console::visible(s).replace('`', "'")
}

/// [`md_code`] for a code span inside a table cell: a `|` there ends the cell even inside
/// the span (GitHub Flavored Markdown splits rows before it reads code), so it is written
/// `\|`, which the table reads as a `|` in the cell.
pub fn md_cell_code(s: &str) -> String {
    md_code(s).replace('|', "\\|")
}

/// The most work one page may take, in minijinja's fuel (about one instruction each). The real
/// reports of an 8-GPU node with every pair and size and a fault on every check take under a
/// tenth of it (`report::tests::fuel_*`); a template that loops without end, or nests loops over
/// everything, stops here with an error instead of hanging the run.
pub const FUEL: u64 = 10_000_000;

/// A template that could not be read, parsed or rendered, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// The file: a path under `--templates`, or "embedded NAME".
    pub file: String,
    /// 1-based line and column, when minijinja knows them.
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
    /// Whether the template came from `--templates` (else it is one of nodecert's own).
    pub user: bool,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl From<TemplateError> for crate::error::InputError {
    fn from(e: TemplateError) -> Self {
        use crate::error::{InputError, Location};
        match (e.line, e.column) {
            (Some(line), Some(column)) => InputError::Located {
                location: Location {
                    file: e.file,
                    line,
                    column,
                },
                message: e.message,
            },
            _ => InputError::Other(e.to_string()),
        }
    }
}

/// One template's text and where it came from.
struct Source {
    name: &'static str,
    file: String,
    user: bool,
    text: String,
}

/// The report templates, read and parsed: embedded, or from a `--templates` folder (either page
/// may be left out there and stays the embedded one). Load them before a run, so that a broken
/// template stops the run before it starts.
pub struct Templates {
    env: Environment<'static>,
    sources: Vec<Source>,
}

impl Templates {
    /// Read and parse the templates; `dir` is `--templates`.
    pub fn load(dir: Option<&Path>) -> Result<Templates, TemplateError> {
        let mut sources = vec![
            Source {
                name: HTML_TEMPLATE,
                file: format!("embedded {HTML_TEMPLATE}"),
                user: false,
                text: EMBEDDED_HTML.to_string(),
            },
            Source {
                name: MD_TEMPLATE,
                file: format!("embedded {MD_TEMPLATE}"),
                user: false,
                text: EMBEDDED_MD.to_string(),
            },
        ];
        if let Some(dir) = dir {
            let refuse = |message: String| TemplateError {
                file: format!("--templates {}", dir.display()),
                line: None,
                column: None,
                message,
                user: true,
            };
            if !dir.is_dir() {
                return Err(refuse("not a folder".into()));
            }
            let mut found = false;
            for s in &mut sources {
                let p = dir.join(s.name);
                if p.symlink_metadata().is_err() {
                    continue;
                }
                s.text = crate::fsio::read::read_to_string(&p, crate::fsio::read::Kind::Template)
                    .map_err(|e| TemplateError {
                    file: p.display().to_string(),
                    line: None,
                    column: None,
                    message: format!("cannot read it: {e}"),
                    user: true,
                })?;
                s.file = p.display().to_string();
                s.user = true;
                found = true;
            }
            if !found {
                return Err(refuse(format!(
                    "neither {HTML_TEMPLATE} nor {MD_TEMPLATE} found there"
                )));
            }
        }
        for s in sources.iter().filter(|s| s.user) {
            if let Some((at, len)) = long_tag(&s.text) {
                let (line, column) = crate::config::line_col(&s.text, at);
                return Err(TemplateError {
                    file: s.file.clone(),
                    line: Some(line),
                    column: Some(column),
                    message: format!(
                        "a tag of {len} bytes or more: nodecert reads tags ({{{{ ... }}}}, \
                         {{% ... %}}) of at most {MAX_TAG} bytes (an expression that long could \
                         exhaust the stack of the template engine); split it with `set`"
                    ),
                    user: true,
                });
            }
        }
        let mut env = base_env();
        for s in &sources {
            env.add_template_owned(s.name, s.text.clone())
                .map_err(|e| located(&e, &sources))?;
        }
        Ok(Templates { env, sources })
    }

    /// Whether a page comes from `--templates`.
    pub fn any_user(&self) -> bool {
        self.sources.iter().any(|s| s.user)
    }

    /// Render both pages from evidence.
    pub fn render(&self, ev: &Evidence, signing: &Signing) -> Result<Rendered, TemplateError> {
        let rendered = self.try_render(ev, signing)?;
        self.says_simulated(ev, signing, &rendered)?;
        Ok(rendered)
    }

    /// Render both pages as [`Templates::render`] does, without asking a simulated run's page
    /// to say so: for the trial of `--templates` on a sample (simulated) evidence before a run
    /// on hardware, whose pages need not.
    pub fn try_render(&self, ev: &Evidence, signing: &Signing) -> Result<Rendered, TemplateError> {
        let mut v = view::build(ev);
        if let Some(s) = &signing.signed_as {
            v.verdict = match v.verdict.strip_suffix(')') {
                Some(head) if v.simulated => format!("{head}; {s})"),
                _ => format!("{} ({s})", v.verdict),
            };
        }
        let ctx = minijinja::context! {
            ev => Value::from(Serde(&for_templates(ev))),
            v => Value::from(Serde(&v)),
            signing => Value::from(Serde(signing)),
        };
        let page = |name: &str| {
            self.env
                .get_template(name)
                .and_then(|t| t.render(&ctx))
                .map_err(|e| located(&e, &self.sources))
        };
        Ok(Rendered {
            html: page(HTML_TEMPLATE)?,
            markdown: page(MD_TEMPLATE)?,
        })
    }

    /// A simulated run's page says so, whoever wrote its template: one that does not could be
    /// signed and read as a certificate of hardware. It must say so because the run is
    /// simulated, not because a hostname, a GPU name or a suite's name holds the word: the page
    /// must say SIMULATED and differ from what the same template renders for the same evidence
    /// marked measured (every simulated flag and the simulation record taken away), whose node
    /// and suite strings are the same. A template that ignores whether the run is simulated
    /// renders both alike.
    fn says_simulated(
        &self,
        ev: &Evidence,
        signing: &Signing,
        rendered: &Rendered,
    ) -> Result<(), TemplateError> {
        if ev.simulated {
            let mut measured = ev.clone();
            measured.simulated = false;
            measured.simulation = None;
            measured.backend.simulated = false;
            // A template that reads the simulation record unguarded cannot render the measured
            // copy: it reacts to the run being simulated, as the check asks.
            let unmarked = self.try_render(&measured, signing).ok();
            for (name, text, without) in [
                (
                    HTML_TEMPLATE,
                    &rendered.html,
                    unmarked.as_ref().map(|u| &u.html),
                ),
                (
                    MD_TEMPLATE,
                    &rendered.markdown,
                    unmarked.as_ref().map(|u| &u.markdown),
                ),
            ] {
                if !text.contains("SIMULATED") || without == Some(text) {
                    let source = self.sources.iter().find(|s| s.name == name);
                    return Err(TemplateError {
                        file: source.map_or_else(|| format!("embedded {name}"), |s| s.file.clone()),
                        line: None,
                        column: None,
                        message: "the page never says SIMULATED, and the run is simulated: a \
                                  simulated run's pages must say so (show it when \
                                  v.simulated is true, as the embedded templates do)"
                            .into(),
                        user: source.is_some_and(|s| s.user),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The evidence as templates see it: as in the file, except that a finding's `subject` and a
/// fact's `value` are the words people read ("GPU 2 link 7", "0 of 1024 wrong"), with the
/// fields beside them as `about` and `typed`. Templates written for evidence format 2, whose
/// subjects and values were words, render as before.
fn for_templates(ev: &Evidence) -> serde_json::Value {
    let mut v = serde_json::to_value(ev).unwrap_or_default();
    use crate::evidence::{Fact, Finding};
    let words = |records: &mut serde_json::Value, findings: &[Finding], facts: &[Fact]| {
        if let Some(fs) = records.get_mut("findings").and_then(|f| f.as_array_mut()) {
            for (j, f) in fs.iter_mut().enumerate() {
                if let (Some(obj), Some(x)) = (f.as_object_mut(), findings.get(j)) {
                    let about = obj.remove("subject").unwrap_or_default();
                    obj.insert("subject".into(), x.subject.describe().into());
                    obj.insert("about".into(), about);
                }
            }
        }
        if let Some(fs) = records.get_mut("facts").and_then(|f| f.as_array_mut()) {
            for (j, f) in fs.iter_mut().enumerate() {
                if let (Some(obj), Some(x)) = (f.as_object_mut(), facts.get(j)) {
                    let typed = obj.remove("value").unwrap_or_default();
                    obj.insert("value".into(), x.value.describe().into());
                    obj.insert("typed".into(), typed);
                }
            }
        }
    };
    if let Some(checks) = v.get_mut("checks").and_then(|c| c.as_array_mut()) {
        for (i, c) in checks.iter_mut().enumerate() {
            let Some(rec) = ev.checks.get(i) else {
                continue;
            };
            words(c, &rec.findings, &rec.facts);
            let earlier = c
                .get_mut("remeasure")
                .and_then(|r| r.get_mut("earlier"))
                .and_then(|e| e.as_array_mut());
            if let (Some(earlier), Some(r)) = (earlier, &rec.remeasure) {
                for (k, a) in earlier.iter_mut().enumerate() {
                    if let Some(at) = r.earlier.get(k) {
                        words(a, &at.findings, &at.facts);
                    }
                }
            }
        }
    }
    v
}

/// A minijinja error as a [`TemplateError`]: the file it names, its line, and the column of
/// the start of the byte range it points at.
/// The longest tag (`{{ ... }}` or `{% ... %}`) a template of `--templates` may hold, in bytes.
/// minijinja bounds how deep brackets and blocks nest, but not a chain of operators (`1 + 1 +
/// ...`, `- - - 1`, `x|abs|abs...`), whose parse and evaluation recurse once per link: tens of
/// thousands overflow the stack and abort nodecert. nodecert's own tags are under 100 bytes.
pub const MAX_TAG: usize = 4096;

/// The first tag of `text` longer than [`MAX_TAG`]: its byte offset and a length it reaches.
/// A tag ends as the template lexer ends it: at its closing delimiter outside a quoted string
/// and outside brackets (`{{ {'a': 1}.a }}` is one tag); one never closed runs to the end of the
/// text. Comments (`{# ... #}`) and raw blocks (`{% raw %} ... {% endraw %}`) hold no tags.
fn long_tag(text: &str) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let find = |from: usize, pat: &[u8]| {
        b.get(from..)
            .and_then(|rest| rest.windows(pat.len()).position(|w| w == pat))
            .map(|p| from + p)
    };
    let mut i = 0;
    while i + 1 < b.len() {
        let close = match (b[i], b[i + 1]) {
            (b'{', b'{') => b'}',
            (b'{', b'%') => b'%',
            (b'{', b'#') => {
                i = find(i + 2, b"#}").map_or(b.len(), |e| e + 2);
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let start = i;
        let mut j = i + 2;
        let mut quote: Option<u8> = None;
        let mut depth = 0usize;
        let end = loop {
            if j >= b.len() {
                break b.len();
            }
            match quote {
                Some(q) => {
                    if b[j] == b'\\' {
                        j += 1;
                    } else if b[j] == q {
                        quote = None;
                    }
                }
                None => match b[j] {
                    b'"' | b'\'' => quote = Some(b[j]),
                    c if depth == 0 && c == close && b.get(j + 1) == Some(&b'}') => break j + 2,
                    b'(' | b'[' | b'{' => depth += 1,
                    b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                    _ => {}
                },
            }
            j += 1;
        };
        if end - start > MAX_TAG {
            return Some((start, end - start));
        }
        i = end;
        // A raw block: nothing in it is a tag, up to its `endraw`.
        let inner = text.get(start + 2..end.saturating_sub(2)).unwrap_or("");
        if close == b'%'
            && inner.trim_matches(|c: char| c.is_whitespace() || c == '-' || c == '+') == "raw"
        {
            i = find(end, b"endraw").map_or(b.len(), |e| e + 6);
        }
    }
    None
}

fn located(e: &minijinja::Error, sources: &[Source]) -> TemplateError {
    let src = e.name().and_then(|n| sources.iter().find(|s| s.name == n));
    let column = match (src, e.line(), e.range()) {
        (Some(s), Some(_), Some(r)) => s.text.get(..r.start).map(|before| {
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            before[line_start..].chars().count() + 1
        }),
        _ => None,
    };
    let message = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    TemplateError {
        file: src
            .map(|s| s.file.clone())
            .or_else(|| e.name().map(String::from))
            .unwrap_or_else(|| "template".into()),
        line: e.line(),
        column,
        message,
        user: src.is_some_and(|s| s.user),
    }
}

pub(crate) fn template_error(e: &minijinja::Error) -> String {
    located(e, &[]).to_string()
}

/// Render both pages from evidence, with the templates of `templates` (`--templates`) or the
/// embedded ones.
pub fn render(
    ev: &Evidence,
    templates: Option<&Path>,
    signing: &Signing,
) -> Result<Rendered, String> {
    Templates::load(templates)
        .and_then(|t| t.render(ev, signing))
        .map_err(|e| e.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::simulated;

    /// Evidence that reads renders: a simulated run's file without its simulation record (an
    /// optional field, absent from the JSON) still renders, and still says SIMULATED, on both
    /// pages (found by fuzzing: the embedded templates failed on `ev.simulation`).
    #[test]
    fn evidence_without_an_optional_field_renders() {
        let mut ev = simulated("h200-vm-1", &[]);
        ev.simulation = None;
        let text = ev.to_json().unwrap();
        assert!(
            !text.contains("\"simulation\""),
            "the field is absent, not null"
        );
        let back = Evidence::from_text(std::path::Path::new("e.json"), &text).unwrap();
        assert!(back.simulated);
        let r = render(&back, None, &Signing::default()).unwrap();
        assert!(r.html.contains("SIMULATED RESULTS"));
        assert!(r.markdown.contains("SIMULATED RESULTS"));
        // Printing a field that is not there is still an error, at its place.
        let env = base_env();
        let e = env
            .render_str(
                "{{ ev.nothing_here }}",
                minijinja::context! { ev => Serde(&back) },
            )
            .unwrap_err();
        assert!(e.to_string().contains("undefined"), "{e}");
    }

    /// A chain of operators that would overflow the template engine's stack is refused before
    /// it is parsed, at its line and column; a tag ends outside a string as the lexer reads it.
    #[test]
    fn a_tag_longer_than_the_engine_can_parse_is_refused_where_it_starts() {
        assert_eq!(long_tag("{{ a + b }} {% if x %}y{% endif %}"), None);
        let chain = format!("text\n  {{{{ 1{} }}}}", " + 1".repeat(2000));
        assert_eq!(long_tag(&chain), Some((7, chain.len() - 7)));
        let just = format!("{{{{ {} }}}}", "x".repeat(MAX_TAG - 6));
        assert_eq!(just.len(), MAX_TAG);
        assert_eq!(long_tag(&just), None);
        assert!(long_tag(&format!("{{{{ {} }}}}", "x".repeat(MAX_TAG - 5))).is_some());
        // A closing delimiter inside a string does not end the tag; one after it does.
        let quoted = format!("{{{{ \"}}}}\" ~ '%}}' ~ 1{} }}}}", " + 1".repeat(2000));
        assert_eq!(long_tag(&quoted).map(|x| x.0), Some(0));
        assert_eq!(long_tag("{{ \"a\\\"}}\" }} {{ b }}"), None);
        // A tag never closed runs to the end.
        let open = format!("{{% if {}", "x".repeat(MAX_TAG));
        assert_eq!(long_tag(&open), Some((0, open.len())));
        // Braces inside the tag do not end it, as the lexer reads it: a dict literal first.
        let dict = format!("{{{{ {{'a': {{'b': 1}}}}.a.b{} }}}}", " + 1".repeat(2000));
        assert_eq!(long_tag(&dict), Some((0, dict.len())));
        // Comments and raw blocks hold no tags: a quote in them swallows nothing.
        let quiet = format!(
            "{{# it's {{{{ #}} {{% raw %}}{{{{ don't }}}}{{% endraw %}} {{{{ x }}}}{}",
            " text".repeat(2000)
        );
        assert_eq!(long_tag(&quiet), None);
        // Nor do they hide a long tag after them.
        let after = format!("{{# c #}}{{% raw %}}x{{% endraw %}}{chain}");
        assert!(long_tag(&after).is_some());
        // Through Templates::load: refused with its place, as a user's template error.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(MD_TEMPLATE), format!("ok\n{chain}\n")).unwrap();
        let e = Templates::load(Some(d.path())).err().unwrap();
        assert!(e.user);
        assert_eq!((e.line, e.column), (Some(3), Some(3)));
        assert!(e.message.contains("at most 4096 bytes"), "{}", e.message);
    }

    impl Templates {
        fn with_fuel(mut self, fuel: u64) -> Templates {
            self.env.set_fuel(Some(fuel));
            self
        }
    }

    /// The biggest reports nodecert writes for a shipped node: 8 GPUs, every pair and size,
    /// and a fault under every check, so that every findings list and table is full.
    fn big_node() -> Evidence {
        simulated(
            "h200-sxm-8",
            &[
                "nvlink-down:gpu=2",
                "slow-gpu-pair:gpu=1,peer=4",
                "slow-gpu-pair:gpu=3,peer=6",
                "slow-host-bandwidth:gpu=5",
                "pcie-downtrained:gpu=7",
                "slow-collective",
                "ecc-uncorrectable:gpu=0",
                "row-remap-pending:gpu=1",
                "xid:gpu=2,code=79",
                "thermal-throttle:gpu=3",
                "corrupt-copy:gpu=4,peer=5",
                "replica-mismatch:gpu=6",
            ],
        )
    }

    /// A `--templates` folder holding `report.md.j2` with `text`.
    fn user_md(text: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(MD_TEMPLATE), text).unwrap();
        d
    }

    /// A `--templates` folder holding `report.html.j2` with `text`.
    fn user_html(text: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(HTML_TEMPLATE), text).unwrap();
        d
    }

    #[test]
    fn markdown_text_escapes_a_heading_or_a_quote_at_its_start_only() {
        assert_eq!(md_text("# Passed"), "\\# Passed");
        assert_eq!(md_text("> quoted"), "\\> quoted");
        assert_eq!(md_text("   ## h"), "   \\## h");
        assert_eq!(md_text("GPU #3 > GPU 2"), "GPU #3 > GPU 2");
        assert_eq!(md_text(""), "");
    }

    /// A character reference would be decoded into the mark `visible` shows as an escape (a
    /// right-to-left override), and `_`, `~` would make emphasis or strike text out.
    #[test]
    fn markdown_text_escapes_references_emphasis_and_strikethrough() {
        assert_eq!(md_text("&#x202E;gpu"), "\\&#x202E;gpu");
        assert_eq!(md_text("_x_ ~~y~~"), "\\_x\\_ \\~\\~y\\~\\~");
        assert_eq!(md_text("sw_power_cap a__b_"), "sw_power_cap a\\_\\_b\\_");
        assert_eq!(md_text("\u{202e}"), "\\\\u{202e}");
    }

    /// GFM makes "www.x" and "scheme://x" into links by itself; in text from the node neither
    /// may become one. Where no link could start, nothing is escaped.
    #[test]
    fn markdown_text_cannot_become_a_gfm_autolink() {
        assert_eq!(md_text("host www.evil.com"), "host www\\.evil.com");
        assert_eq!(
            md_text("see https://evil.com/a"),
            "see https\\://evil.com/a"
        );
        assert_eq!(md_text("ftp://x"), "ftp\\://x");
        assert_eq!(md_text("GPU 0: 1/2 //"), "GPU 0: 1/2 //");
        assert_eq!(md_text("a:/b w.x ww.y"), "a:/b w.x ww.y");
    }

    #[test]
    fn a_code_span_in_a_table_cell_cannot_split_the_cell() {
        assert_eq!(md_code("a|b`c"), "a|b'c");
        assert_eq!(md_cell_code("a|b`c\u{1b}"), "a\\|b'c\\u{1b}");
    }

    /// The code spans of the Markdown page's tables (suite origin and digest, a GPU's UUID,
    /// the signing rows) show a `|` as `\\|`: a `|` in a code span still ends a GFM cell.
    #[test]
    fn the_markdown_reports_code_spans_cannot_split_their_cells() {
        let mut ev = simulated("h200-vm-1", &[]);
        ev.suite.origin = "o|rigin`".into();
        ev.suite.sha256 = "ab|cd".into();
        ev.node.gpus[0].uuid = "GPU-|u".into();
        let signing = Signing {
            fingerprint: Some("SHA256:f|p".into()),
            evidence_sha256: Some("e|v".into()),
            verify_command: Some("ssh-keygen -Y verify | tee".into()),
            signed_as: None,
        };
        let md = Templates::load(None)
            .unwrap()
            .render(&ev, &signing)
            .unwrap()
            .markdown;
        for cell in [
            "(`o\\|rigin'`)",
            "| `ab\\|cd` |",
            "| `GPU-\\|u` |",
            "| `SHA256:f\\|p` |",
            "| `e\\|v` |",
            "| `ssh-keygen -Y verify \\| tee` |",
        ] {
            assert!(md.contains(cell), "{cell} in {md}");
        }
    }

    /// What the embedded Markdown page printed raw where `| md` was left out (the simulated
    /// node's name and faults, a failing check's title in the problems table, a GPU's CPU
    /// affinity in the topology table) can make no markup.
    #[test]
    fn the_markdown_report_escapes_what_it_does_not_mark_as_markup() {
        let mut ev = simulated("h200-vm-1", &["ecc-uncorrectable"]);
        let evil = "x|y*z*[a](b)<i>";
        if let Some(s) = ev.simulation.as_mut() {
            s.node = evil.into();
            s.faults = vec![evil.into()];
        }
        for c in &mut ev.checks {
            c.title = evil.into();
        }
        ev.node.gpus[0].cpu_affinity = Some(evil.into());
        let md = Templates::load(None)
            .unwrap()
            .render(&ev, &Signing::default())
            .unwrap()
            .markdown;
        let escaped = "x\\|y\\*z\\*\\[a\\](b)&lt;i>";
        assert!(
            md.contains(&format!("({escaped}, seed "))
                && md.contains(&format!("injected faults: {escaped})")),
            "{md}"
        );
        assert!(md.contains(&format!("\n| {escaped} | **FAIL** | ")), "{md}");
        assert!(md.contains(&format!(" | {escaped} |\n")), "{md}");
        assert!(!md.contains(evil), "{md}");
    }

    /// Markdown pages escape by default, `--templates` ones too: a value printed without a
    /// filter is [`md_text`] (a boolean or a number as minijinja writes it), `| md` is not
    /// escaped twice, and `| safe` is the template's own markup.
    #[test]
    fn a_users_markdown_template_escapes_by_default() {
        let d = user_md(
            "{{ ev.node.hostname }}\n{{ ev.node.hostname | md }}\n{{ ev.node.hostname | safe }}\n\
             {{ ev.node.gpus | length }} {{ v.simulated }} {{ ev.simulation.seed }}\n\
             `{{ ev.node.hostname | md_code }}`\n{{ v.verdict }}\n",
        );
        let mut ev = simulated("h200-vm-1", &[]);
        ev.node.hostname = "# *node* | <b>\u{202e}".into();
        let md = Templates::load(Some(d.path()))
            .unwrap()
            .render(&ev, &Signing::default())
            .unwrap()
            .markdown;
        // The bidi override is shown as `\u{202e}`, and md_text escapes that backslash.
        let escaped = "\\# \\*node\\* \\| &lt;b>\\\\u{202e}";
        let seed = ev.simulation.as_ref().map_or(0, |s| s.seed);
        assert_eq!(
            md,
            format!(
                "{escaped}\n{escaped}\n# *node* | <b>\u{202e}\n1 True {seed}\n\
                 `# *node* | <b>\\u{{202e}}`\nPASS (SIMULATED)\n"
            )
        );
    }

    /// The diff page printed checks, metrics, subjects and units raw; they are Markdown text
    /// now, and the evidence's path is a code span that cannot split its cell.
    #[test]
    fn the_markdown_diff_escapes_names_and_subjects() {
        let old = simulated("h100-sxm-8", &[]);
        let new = simulated("h100-sxm-8", &["slow-gpu-pair:gpu=1,peer=4"]);
        let mut d = crate::diff::compare(&old, &new, 5.0);
        let evil = "x|y*<b>";
        d.old.source = "old|ev.json".into();
        for c in &mut d.regressions {
            c.check = evil.into();
            c.metric = evil.into();
            c.subject_text = evil.into();
            c.old_subject_text = Some(evil.into());
            c.unit = evil.into();
        }
        for v in &mut d.verdicts {
            v.check = evil.into();
            v.subject = Some(evil.into());
            v.metric = Some(evil.into());
        }
        assert!(!d.regressions.is_empty() && !d.verdicts.is_empty());
        let md = render_diff(&d).unwrap().markdown;
        let e = "x\\|y\\*&lt;b>";
        assert!(
            md.contains(&format!("| {e} | {e} | {e} (was {e}) | "))
                && md.contains(&format!(" {e} | ")),
            "{md}"
        );
        assert!(
            md.contains(&format!("| {e} | {e} | {e} | ")),
            "verdicts: {md}"
        );
        assert!(!md.contains(evil), "{md}");
        assert!(md.contains("| Evidence | `old\\|ev.json` |"), "{md}");
    }

    /// A page that never says SIMULATED is refused for a simulated run only: the trial before
    /// a run (on a simulated sample) and a measured run's pages render it.
    #[test]
    fn only_a_simulated_runs_page_must_say_so() {
        let d = user_md("certificate of {{ ev.node.hostname }}\n");
        let t = Templates::load(Some(d.path())).unwrap();
        let ev = simulated("h200-vm-1", &[]);
        let e = t.render(&ev, &Signing::default()).unwrap_err();
        assert!(e.message.contains("never says SIMULATED"), "{e}");
        assert!(e.user);
        assert!(t.try_render(&ev, &Signing::default()).is_ok());
        let mut measured = ev;
        measured.simulated = false;
        let r = t.render(&measured, &Signing::default()).unwrap();
        assert_eq!(r.markdown, "certificate of sim-h200-vm\n");
    }

    /// The word in a node's or a suite's strings is not the page saying the run is simulated.
    #[test]
    fn a_simulated_word_from_the_node_does_not_stand_for_the_pages_own() {
        let d = user_md("certificate of {{ ev.node.hostname }} for {{ ev.suite.name }}\n");
        let t = Templates::load(Some(d.path())).unwrap();
        let mut ev = simulated("h200-vm-1", &[]);
        ev.node.hostname = "SIMULATED-node".into();
        ev.suite.name = "SIMULATED".into();
        let e = t.render(&ev, &Signing::default()).unwrap_err();
        assert!(e.message.contains("never says SIMULATED"), "{e}");
        // A template that shows it when the run is simulated passes, the hostname notwithstanding.
        let d = user_md(
            "certificate of {{ ev.node.hostname }}{% if v.simulated %} (SIMULATED){% endif %}\n",
        );
        let t = Templates::load(Some(d.path())).unwrap();
        let r = t.render(&ev, &Signing::default()).unwrap();
        assert_eq!(r.markdown, "certificate of SIMULATED-node (SIMULATED)\n");
        // And so does one that shows the verdict, which says SIMULATED of a simulated run.
        let d = user_md("{{ ev.node.hostname }}: {{ v.verdict }}\n");
        let t = Templates::load(Some(d.path())).unwrap();
        assert!(t.render(&ev, &Signing::default()).is_ok());
        // And one that shows it from the simulation record, or says "not SIMULATED" of a
        // measured run.
        for text in [
            "{{ ev.node.hostname }}{% if ev.simulation %} SIMULATED{% endif %}\n",
            "{{ ev.node.hostname }}{% if ev.backend.simulated %} SIMULATED{% endif %}\n",
            "{% if v.simulated %}SIMULATED{% else %}not SIMULATED{% endif %}\n",
        ] {
            let d = user_md(text);
            let t = Templates::load(Some(d.path())).unwrap();
            assert!(t.render(&ev, &Signing::default()).is_ok(), "{text}");
        }
    }

    /// "Every GPU pair is linked as the suite expects" only where pairs were compared.
    #[test]
    fn the_topology_section_says_linked_as_expected_only_when_it_compared() {
        let page = |ev: &Evidence| {
            let r = Templates::load(None)
                .unwrap()
                .render(ev, &Signing::default())
                .unwrap();
            (r.markdown, r.html)
        };
        let ev = simulated("h100-sxm-8", &[]);
        for text in [page(&ev).0, page(&ev).1] {
            assert!(text.contains("Every GPU pair is linked as the suite expects."));
            assert!(!text.contains("Not compared: the suite states no links"));
        }
        let mut unchecked = ev.clone();
        unchecked.checks.retain(|c| c.id != "topology");
        let mut unstated = ev;
        unstated.suite.resolved.topology = Default::default();
        for ev in [unchecked, unstated] {
            for text in [page(&ev).0, page(&ev).1] {
                assert!(!text.contains("Every GPU pair is linked"), "{text}");
                assert!(text.contains("Not compared: the suite states no links"));
            }
        }
    }

    /// On an HTML page the Markdown filters make no safe string: what they return is escaped
    /// for HTML like any other value.
    #[test]
    fn the_markdown_filters_cannot_bypass_html_escaping() {
        let d = user_html(
            "{{ ev.node.hostname | md }}|{{ ev.node.hostname | md_code }}|\
             {{ ev.node.hostname | md_cell_code }}|{{ v.verdict }}",
        );
        let mut ev = simulated("h200-vm-1", &[]);
        ev.node.hostname = "<script>x`".into();
        let html = Templates::load(Some(d.path()))
            .unwrap()
            .render(&ev, &Signing::default())
            .unwrap()
            .html;
        assert_eq!(
            html,
            "&amp;lt;script&gt;x\\`|&lt;script&gt;x&#x27;|&lt;script&gt;x&#x27;|PASS (SIMULATED)"
        );
    }

    /// A bidi override or a control character in a node's name is shown, not obeyed, in the
    /// HTML page's title, heading and text.
    #[test]
    fn the_html_report_shows_hidden_characters_as_escapes() {
        let mut ev = simulated("h200-vm-1", &[]);
        ev.node.hostname = "node\u{202e}lmth.exe\u{1b}[2K\u{2066}".into();
        let html = Templates::load(None)
            .unwrap()
            .render(&ev, &Signing::default())
            .unwrap()
            .html;
        let shown = "node\\u{202e}lmth.exe\\u{1b}[2K\\u{2066}";
        assert!(
            html.contains(&format!("nodecert: {shown} — ")),
            "title: {html}"
        );
        assert!(
            html.contains(&format!("<h1>nodecert certificate: {shown}</h1>")),
            "{html}"
        );
        for hidden in ['\u{202e}', '\u{1b}', '\u{2066}'] {
            assert!(!html.contains(hidden), "{hidden:?} in {html}");
        }
    }

    #[test]
    fn the_biggest_real_reports_take_under_a_hundredth_of_the_fuel() {
        let ev = big_node();
        let t = Templates::load(None).unwrap().with_fuel(FUEL / 100);
        let r = t
            .render(&ev, &Signing::default())
            .expect("within a hundredth");
        assert!(r.markdown.contains("GPU 7"));
        // And the limit is real: far less fuel stops the same pages.
        let t = Templates::load(None).unwrap().with_fuel(FUEL / 10_000);
        let e = t.render(&ev, &Signing::default()).unwrap_err();
        assert!(e.message.contains("fuel"), "{e}");
    }

    #[test]
    fn a_user_template_that_reads_every_sample_takes_under_a_tenth_of_the_fuel() {
        let d = user_md(
            "{{ v.verdict }}\n{% for c in ev.checks %}{% for m in c.metrics %}{{ m.name }}\
             {% for x in m.samples %} {{ x }}{% endfor %}\n{% endfor %}{% endfor %}",
        );
        let t = Templates::load(Some(d.path()))
            .unwrap()
            .with_fuel(FUEL / 10);
        let r = t
            .render(&big_node(), &Signing::default())
            .expect("within a tenth");
        assert!(r.markdown.lines().count() > 100);
    }

    #[test]
    fn a_nested_loop_stops_on_fuel_with_its_place() {
        let d = user_md(
            "# {{ ev.suite.name }}\n{% for a in range(100000) %}{% for b in range(100000) %}\
             {{ a }}{% endfor %}{% endfor %}",
        );
        let t = Templates::load(Some(d.path())).unwrap();
        let started = std::time::Instant::now();
        let e = t
            .render(&simulated("h200-vm-1", &[]), &Signing::default())
            .unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        assert!(e.message.contains("ran out of fuel"), "{e}");
        assert_eq!(e.file, d.path().join(MD_TEMPLATE).display().to_string());
        assert_eq!(e.line, Some(2));
        assert!(e.column.is_some(), "{e:?}");
        assert!(e.user);
    }

    #[test]
    fn a_syntax_error_names_file_line_and_column() {
        let d = user_md("# report\nok {{ v.verdict }}\n  x {% if %}\n");
        let e = Templates::load(Some(d.path())).err().expect("refused");
        let file = d.path().join(MD_TEMPLATE).display().to_string();
        assert_eq!(
            (e.file.as_str(), e.line, e.column),
            (file.as_str(), Some(3), Some(11))
        );
        assert!(e.message.starts_with("syntax error"), "{e}");
        assert_eq!(e.to_string(), format!("{file}:3:11: {}", e.message));
        // Located input: exit 2 with file, line and column.
        let i = crate::error::InputError::from(e);
        assert!(matches!(i, crate::error::InputError::Located { .. }), "{i}");
    }

    #[test]
    fn an_undefined_value_is_found_on_evidence_with_its_column() {
        let d = user_md("# report\n\u{e9}\u{e9} {{ ev.no_such_field }}\n");
        let t = Templates::load(Some(d.path())).unwrap();
        let e = t
            .render(&simulated("h200-vm-1", &[]), &Signing::default())
            .unwrap_err();
        // Columns count characters, not bytes: "éé " is three.
        assert_eq!((e.line, e.column), (Some(2), Some(7)), "{e}");
        assert!(e.message.contains("undefined"), "{e}");
    }

    #[test]
    fn a_missing_or_empty_templates_folder_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope");
        let e = Templates::load(Some(&missing)).err().expect("refused");
        assert_eq!(
            e.to_string(),
            format!("--templates {}: not a folder", missing.display())
        );
        let e = Templates::load(Some(d.path())).err().expect("refused");
        assert!(e.message.contains("neither"), "{e}");
        assert!(e.user && e.line.is_none());
    }
}
