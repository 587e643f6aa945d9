//! What the console prints when it is not a terminal: plain progress lines on stderr, no bar and
//! no colour (even without NO_COLOR), and with --quiet one line on stdout and nothing else.

mod util;
use util::Env;

#[test]
fn quiet_prints_one_line_and_nothing_on_stderr() {
    let env = Env::new();
    let out = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h100-sxm-8",
            "--inject",
            "slow-gpu-pair:gpu=1,peer=4",
            "-q",
        ])
        .assert()
        .code(1)
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "FAIL: h100-sxm-8 (simulated)\n"
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn no_colour_and_no_bar_off_a_terminal() {
    let env = Env::new();
    let out = env
        .cmd()
        .env_remove("NO_COLOR")
        .args(["run", "--simulate", "l40s-pcie-4"])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    for s in [&so, &se] {
        assert!(!s.contains('\x1b'), "escape codes off a terminal: {s:?}");
        assert!(!s.contains('\r'), "a progress bar off a terminal: {s:?}");
    }
    // One plain progress line per check, then the summary on stdout; each says the node is
    // simulated, and so does the verdict.
    assert!(
        se.lines()
            .any(|l| l.starts_with("[1/") && l.contains("PASS")),
        "{se}"
    );
    assert!(
        se.lines()
            .filter(|l| l.starts_with('['))
            .all(|l| l.ends_with(" [SIMULATED]")),
        "{se}"
    );
    assert!(so.contains("\n[SIMULATED] PASS: node passed"), "{so}");
}
