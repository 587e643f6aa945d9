//! The reports of a simulated run with a slow GPU pair: inline SVG in the HTML, matrices with
//! marked cells in the Markdown, and the simulated label on both.

mod util;
use util::Env;

fn slow_pair(env: &Env) {
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h100-sxm-8",
            "--inject",
            "slow-gpu-pair:gpu=1,peer=4",
            "--inject",
            "nvlink-down:gpu=2",
            "--out",
            "out",
            "-q",
        ])
        .assert()
        .code(1);
}

#[test]
fn html_has_the_heatmaps_and_charts_inline() {
    let env = Env::new();
    slow_pair(&env);
    let html = env.read("out/report.html");
    for id in [
        "heatmap-p2p_read",
        "heatmap-p2p_bidir",
        "chart-all_reduce",
        "chart-all_to_all",
        "chart-loss",
        "chart-step-time",
    ] {
        let at = html
            .find(&format!("<figure id=\"{id}\"><svg "))
            .unwrap_or_else(|| panic!("no inline SVG in #{id}"));
        assert!(html[at..].contains("</svg>"));
    }
    // SVG is emitted as markup, not escaped text.
    assert!(!html.contains("&lt;svg"));
    assert!(html.contains("<g class=\"cell fail\"><title>GPU1 → GPU4: "));
    // Topology mismatches: an alert and marked cells.
    assert!(html.contains("<div class=\"alert\" role=\"alert\"><strong>✕ 7 GPU pair(s)"));
    assert!(html.contains("<td class=\"mismatch\""));
    // Print: the simulated label repeats on every page.
    assert!(html.contains("@top-center"));
    assert!(html.contains("<div class=\"sim-mark\""));
    assert!(!html.contains("<script"), "no scripts");
}

#[test]
fn markdown_has_the_matrices_with_failing_cells_marked() {
    let env = Env::new();
    slow_pair(&env);
    let md = env.read("out/report.md");
    assert!(md.starts_with("> **SIMULATED RESULTS**"));
    let read = md
        .split("## Peer-to-peer read bandwidth (GB/s, median)")
        .nth(1)
        .expect("read matrix");
    let row = read
        .lines()
        .find(|l| l.starts_with("| **GPU1** |"))
        .expect("GPU1 row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // cells[0] is empty, [1] the label, [2..] GPU0..GPU7.
    assert_eq!(cells[3], "X");
    assert!(
        cells[6].starts_with("**") && cells[6].ends_with(" ✕**"),
        "{row}"
    );
    assert!(!cells[2].contains('✕'));
    assert_eq!(cells.len(), 11, "label + 8 GPUs between pipes: {row}");
    assert!(md.contains("## Peer-to-peer bandwidth, both ways at once (GB/s, median)"));
    assert!(md.contains("**✕ 7 GPU pair(s) are not linked as the suite expects:**"));
    assert!(md.contains("<details><summary>Loss and step time, every step"));
    // No blank-line runs that some renderers show as gaps.
    assert!(!md.contains("\n\n\n"), "three newlines in a row");
}

/// `render --out` a folder that holds another run's evidence (or a fleet report) would leave
/// pages that describe another run beside it: refused, the folder untouched, unless --force;
/// its own folder, or a folder holding the same bytes, is rendered as ever.
#[test]
fn render_into_another_runs_folder_is_refused() {
    let env = Env::new();
    for (out, node) in [("a", "h200-vm-1"), ("b", "l40s-pcie-4")] {
        env.cmd()
            .args(["run", node, "--simulate", node, "--out", out, "-q"])
            .assert()
            .code(0);
    }
    let before = env.read("b/report.md");
    let out = env
        .cmd()
        .args(["render", "a/evidence.json", "--out", "b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("holds the evidence of another run (evidence.json)"),
        "{err}"
    );
    assert_eq!(env.read("b/report.md"), before, "untouched");
    // Its own folder, and a copy of the same evidence, render.
    env.cmd().args(["render", "a"]).assert().code(0);
    std::fs::create_dir_all(env.path("c")).unwrap();
    std::fs::copy(env.path("a/evidence.json"), env.path("c/evidence.json")).unwrap();
    env.cmd()
        .args(["render", "a/evidence.json", "--out", "c"])
        .assert()
        .code(0);
    // A fleet's folder is refused too, even with --force (a node's report beside a fleet's
    // could be signed as neither), as `run` into it is; --force renders over another run.
    std::fs::create_dir_all(env.path("f")).unwrap();
    env.write("f/fleet.json", "{}");
    for force in [false, true] {
        let mut cmd = env.cmd();
        cmd.args(["render", "a", "--out", "f"]);
        if force {
            cmd.arg("--force");
        }
        cmd.assert().code(2).stderr(predicates::str::contains(
            "holds a fleet report (fleet.json)",
        ));
    }
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "--out",
            "f",
            "-q",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "refusing to write a node report beside it",
        ));
    assert!(!env.path("f/evidence.json").exists());
    env.cmd()
        .args(["render", "a/evidence.json", "--out", "b", "--force"])
        .assert()
        .code(0);
    assert!(env.read("b/report.md").contains("sim-h200-vm"));
}
