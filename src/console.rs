//! What the console shows: progress while checks run, a summary table at the end. Progress goes
//! to stderr (a bar on a terminal, plain lines otherwise); the summary to stdout.

use crate::evidence::{CheckRecord, Evidence, Status};
use crate::runner::Observer;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub struct Console {
    quiet: bool,
    /// The node is simulated: every line says so.
    simulated: bool,
    color: bool,
    bar: Option<ProgressBar>,
    tty: bool,
    index: usize,
    total: usize,
}

impl Console {
    pub fn new(quiet: bool, simulated: bool) -> Self {
        let tty = std::io::stderr().is_terminal();
        let color = std::io::stdout().is_terminal() && !no_color();
        Console {
            quiet,
            simulated,
            color,
            bar: None,
            tty,
            index: 0,
            total: 0,
        }
    }

    pub fn color(&self) -> bool {
        self.color
    }

    fn tag(&self) -> &'static str {
        simulated_tag(self.simulated)
    }
}

/// What ends each console line about a simulated node.
pub fn simulated_tag(simulated: bool) -> &'static str {
    if simulated {
        " [SIMULATED]"
    } else {
        ""
    }
}

/// NO_COLOR (no-color.org): set to anything but the empty string, it turns colour off.
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

pub fn paint(s: Status, color: bool) -> String {
    let l = s.label();
    if !color {
        return l.to_string();
    }
    let code = match s {
        Status::Pass => "32",
        Status::Warn => "33",
        Status::Fail => "31",
        Status::Error => "35",
        Status::Skip => "90",
    };
    format!("\x1b[1;{code}m{l}\x1b[0m")
}

impl Observer for Console {
    fn check_started(&mut self, index: usize, total: usize, title: &str, _plan: &[String]) {
        self.index = index;
        self.total = total;
        if self.quiet {
            return;
        }
        if self.tty {
            // Styled while hidden, so the first frame already shows the title; the prefix lines
            // up with the result line that replaces the bar.
            let bar = ProgressBar::hidden();
            bar.set_length(1);
            bar.set_style(
                ProgressStyle::with_template("{prefix} {msg:32} [{bar:30}] {pos}/{len}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_prefix(format!("[{}/{}]", index + 1, total));
            bar.set_message(visible(title));
            bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar = Some(bar);
        }
    }

    fn remeasuring(&mut self, attempt: u32, allowed: u32, missed: &str) {
        if self.quiet {
            return;
        }
        let line = format!(
            "[{}/{}] missed: {}; measuring again, attempt {attempt} of {allowed}{}",
            self.index + 1,
            self.total,
            visible(missed),
            self.tag()
        );
        match &self.bar {
            Some(b) => b.println(line),
            None => crate::errln!("{line}"),
        }
    }

    fn progress(&mut self, done: usize, total: usize) {
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
    }

    fn check_finished(&mut self, r: &CheckRecord) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if self.quiet {
            return;
        }
        crate::errln!(
            "[{}/{}] {:<32} {:>5}  {:.1}s{}",
            self.index + 1,
            self.total,
            visible(&r.title),
            paint(r.status, self.tty && self.color),
            r.duration_s,
            self.tag()
        );
    }

    fn after_checks(&mut self, r: &CheckRecord) {
        if self.quiet {
            return;
        }
        crate::errln!(
            "[end] {:<32} {:>5}  {}{}",
            visible(&r.title),
            paint(r.status, self.tty && self.color),
            visible(&r.summary),
            self.tag()
        );
    }
}

/// `s` as it may reach a terminal: control characters (ESC, CR, line breaks, C1 codes) and
/// the Unicode controls that reorder text (bidi overrides) are shown as escapes, so a name from
/// a suite or a node can neither move the cursor, recolour, nor fake a line ("PASS: ...").
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// JSON text with every character [`is_hidden`] finds written as a `\uXXXX` escape: the same
/// JSON value, but one that cannot act on the terminal it is printed to (serde_json escapes only
/// U+0000 to U+001F; a C1 control, a bidi override or a line separator from the node would
/// otherwise reach the terminal as it is). Such characters appear only inside JSON strings,
/// where the escape means the character.
pub fn json_visible(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        // Below U+0020 serde_json has escaped every one inside a string already; outside
        // strings are only the line breaks of pretty-printing, kept.
        if c > '\u{1f}' && is_hidden(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{:04x}", u));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` would act on a terminal or a page instead of showing: a control character, or
/// an invisible character that reorders text (bidi marks, overrides and isolates, the Arabic
/// letter mark), joins or separates it unseen (zero-width spaces and joiners, the word joiner,
/// the Mongolian vowel separator, the invisible operators, the byte order mark, the deprecated
/// format characters U+206A to U+206F, the interlinear annotation marks, the tag characters
/// that can carry text no one sees) or breaks a line (U+2028, U+2029).
pub(crate) fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// The table printed at the end of a run.
pub fn summary(ev: &Evidence, color: bool) -> String {
    let mut s = String::new();
    if ev.simulated {
        s.push_str("SIMULATED: these figures come from a simulated node, not from hardware.\n");
    }
    let w = ev
        .checks
        .iter()
        .map(|c| visible(&c.title).len())
        .max()
        .unwrap_or(5)
        .max(5);
    s.push_str(&format!("{:<w$}  {:<6} {}\n", "CHECK", "RESULT", "WHY"));
    for c in &ev.checks {
        let label = paint(c.status, color);
        let pad = 6usize.saturating_sub(c.status.label().len());
        s.push_str(&format!(
            "{:<w$}  {label}{} {}\n",
            visible(&c.title),
            " ".repeat(pad),
            visible(&c.summary)
        ));
    }
    let verdict = ev.assess();
    let shown = match verdict {
        crate::evidence::Verdict::Pass => Status::Pass,
        crate::evidence::Verdict::Fail => Status::Fail,
        crate::evidence::Verdict::Error => Status::Error,
        _ => Status::Warn,
    };
    let label = match color {
        true => paint(shown, color).replace(shown.label(), verdict.label()),
        false => verdict.label().to_string(),
    };
    if let Some(t) = ev.shortfall_text() {
        s.push_str(&format!("\n{t}"));
    }
    s.push_str(&format!(
        "\n{}{}: {} on {} ({}), suite {}\n",
        if ev.simulated { "[SIMULATED] " } else { "" },
        label,
        if verdict == crate::evidence::Verdict::Pass {
            "node passed"
        } else {
            "node did not pass"
        },
        visible(&ev.node.hostname),
        visible(&ev.node.summary()),
        visible(&ev.suite.name)
    ));
    // Every line of a simulated node's table says so: a row copied out of it alone must not
    // read as a measured pass.
    tag_lines(&s, ev.simulated)
}

/// `text` with every non-empty line that nodecert has not already marked ending in
/// " [SIMULATED]", when `simulated`; unchanged otherwise. A line is marked when it starts or
/// ends with "[SIMULATED]", or starts with a header "SIMULATED:" or "SIMULATED RESULTS:", where
/// nodecert puts them; the word inside a line (a hostname such as "SIMULATED-7", a suite's name) is the
/// node's text, not the mark.
pub fn tag_lines(text: &str, simulated: bool) -> String {
    if !simulated {
        return text.to_string();
    }
    const MARK: &str = "[SIMULATED]";
    let marked = |l: &str| {
        [MARK, "SIMULATED:", "SIMULATED RESULTS:"]
            .iter()
            .any(|m| l.starts_with(m))
            || l.trim_end().ends_with(MARK)
    };
    text.lines()
        .map(|l| match l.is_empty() || marked(l) {
            true => format!("{l}\n"),
            false => format!("{l}{}\n", simulated_tag(true)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed JSON cannot act on a terminal, and is still the same JSON value.
    #[test]
    fn printed_json_escapes_what_would_act_on_a_terminal() {
        let v = serde_json::json!({ "host": "h\u{9b}2J\u{9d}0;T\u{9c}\u{202e}\u{2028}x\u{1b}[0m é 😀" });
        let text = serde_json::to_string(&v).unwrap();
        assert!(
            text.contains('\u{9b}'),
            "serde_json leaves C1 controls as they are"
        );
        let shown = json_visible(&text);
        assert!(!shown.chars().any(is_hidden), "{shown}");
        assert_eq!(
            shown,
            r#"{"host":"h\u009b2J\u009d0;T\u009c\u202e\u2028x\u001b[0m é 😀"}"#
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, v);
        // Pretty-printed: its line breaks stay what they are, and it reads back the same.
        let pretty = json_visible(&serde_json::to_string_pretty(&v).unwrap());
        assert!(pretty.starts_with("{\n  \"host\""), "{pretty}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap(),
            v
        );
    }

    #[test]
    fn every_line_of_a_simulated_text_is_marked_once_whatever_the_node_is_called() {
        let text = "SIMULATED RESULTS: not a certification of real hardware\n\
                    [SIMULATED] PASS: node passed on SIMULATED-7\n\
                    topology  PASS  SIMULATED-7 as expected\n\
                    \n\
                    suite \"SIMULATED\"  # [SIMULATED]\n";
        assert_eq!(
            tag_lines(text, true),
            "SIMULATED RESULTS: not a certification of real hardware\n\
             [SIMULATED] PASS: node passed on SIMULATED-7\n\
             topology  PASS  SIMULATED-7 as expected [SIMULATED]\n\
             \n\
             suite \"SIMULATED\"  # [SIMULATED]\n"
        );
        assert_eq!(tag_lines(text, false), text);
    }

    #[test]
    fn the_verdict_of_a_simulated_node_says_so_and_a_real_ones_does_not() {
        let mut ev = crate::testutil::simulated("h200-vm-1", &[]);
        let verdict = |ev: &Evidence| {
            summary(ev, false)
                .lines()
                .last()
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            verdict(&ev).starts_with("[SIMULATED] PASS: node passed on "),
            "{}",
            verdict(&ev)
        );
        for l in summary(&ev, false).lines().filter(|l| !l.is_empty()) {
            assert!(l.contains("SIMULATED"), "{l}");
        }
        let table = summary(&ev, false);
        let row = table.lines().find(|l| l.starts_with("Topology"));
        assert!(
            row.is_some_and(|r| r.contains("PASS") && r.ends_with("limits [SIMULATED]")),
            "{table}"
        );
        ev.simulated = false;
        assert!(
            verdict(&ev).starts_with("PASS: node passed on "),
            "{}",
            verdict(&ev)
        );
        assert!(!summary(&ev, false).contains("SIMULATED"));
        assert_eq!(simulated_tag(true), " [SIMULATED]");
        assert_eq!(simulated_tag(false), "");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(visible("plain name-1"), "plain name-1");
        assert_eq!(
            visible("x\r\x1b[2KPASS: node passed\n"),
            "x\\r\\u{1b}[2KPASS: node passed\\n"
        );
        assert_eq!(visible("a\u{202e}b"), "a\\u{202e}b");
        // Tag characters (text no one sees), the annotation marks and the deprecated format
        // characters are shown too; the characters beside each range are not.
        assert_eq!(
            visible("a\u{e0041}\u{e007f}b\u{fff9}\u{fffb}c\u{206a}\u{206f}d"),
            "a\\u{e0041}\\u{e007f}b\\u{fff9}\\u{fffb}c\\u{206a}\\u{206f}d"
        );
        assert_eq!(
            visible("\u{fff8}\u{fffc}\u{e0080}\u{2070}"),
            "\u{fff8}\u{fffc}\u{e0080}\u{2070}"
        );
        let shown = json_visible("\"\u{e0041}\"");
        assert_eq!(shown, "\"\\udb40\\udc41\"");
        assert_eq!(serde_json::from_str::<String>(&shown).unwrap(), "\u{e0041}");
    }

    #[test]
    fn the_arabic_letter_mark_the_mongolian_separator_and_the_word_joiners_are_shown() {
        assert_eq!(
            visible("a\u{61c}b\u{180e}c\u{2060}d\u{2061}e\u{2062}f\u{2063}g\u{2064}h"),
            "a\\u{61c}b\\u{180e}c\\u{2060}d\\u{2061}e\\u{2062}f\\u{2063}g\\u{2064}h"
        );
        // Their neighbours stay: the Arabic semicolon and a Mongolian variation selector.
        assert_eq!(visible("\u{61b}\u{180f}"), "\u{61b}\u{180f}");
    }

    #[test]
    fn an_error_keeps_only_the_line_breaks_nodecert_wrote() {
        use crate::error::{Error, InputError};
        let typed = Error::Input(InputError::Other(
            "x\nPASS: node passed: no such suite".into(),
        ));
        assert_eq!(typed.console_text(), "x\\nPASS: node passed: no such suite");
        let own = Error::Input(InputError::Lines(vec![
            "one".into(),
            "  nodecert render a\nPASS\x07".into(),
        ]));
        assert_eq!(own.console_text(), "one\n  nodecert render a\\nPASS\\u{7}");
    }
}
