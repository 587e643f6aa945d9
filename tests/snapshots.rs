//! Snapshots of both reports, from deterministic simulated runs with volatile fields fixed.
//! After an intended change to a template: `INSTA_UPDATE=always cargo test --test snapshots`,
//! then review the diff of tests/snapshots/*.snap before committing.

use chrono::TimeZone;
use nodecert::evidence::Evidence;

fn fixed(mut ev: Evidence) -> Evidence {
    let t0 = chrono::Utc
        .with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
        .unwrap();
    ev.started_at = t0;
    ev.finished_at = Some(t0 + chrono::Duration::seconds(42));
    ev.nodecert_version = "0.0.0-test".into();
    ev.environment.command_line = vec!["nodecert".into(), "run".into(), "--simulate".into()];
    ev.environment.os = "Test OS".into();
    for c in &mut ev.checks {
        c.started_at = t0;
        c.duration_s = 0.5;
    }
    ev
}

fn render(suite: &str, node: &str, faults: &[&str]) -> nodecert::report::Rendered {
    let ev = fixed(nodecert::runner::simulate(suite, node, faults, 1).expect("simulated run"));
    nodecert::report::render(&ev, None, &Default::default()).expect("render")
}

#[test]
fn markdown_h200_vm() {
    insta::assert_snapshot!(render("h200-vm-1", "h200-vm-1", &[]).markdown);
}

#[test]
fn html_h200_vm() {
    insta::assert_snapshot!(render("h200-vm-1", "h200-vm-1", &[]).html);
}

#[test]
fn markdown_l40s_with_a_slow_pair() {
    insta::assert_snapshot!(
        render(
            "l40s-pcie-4",
            "l40s-pcie-4",
            &["slow-gpu-pair:gpu=1,peer=2"]
        )
        .markdown
    );
}

#[test]
fn markdown_h100_with_nvlink_down() {
    insta::assert_snapshot!(render("h100-sxm-8", "h100-sxm-8", &["nvlink-down:gpu=3"]).markdown);
}

#[test]
fn evidence_shape_is_stable() {
    // The evidence format is a promise: a change here needs a format_version decision.
    let ev = fixed(nodecert::runner::simulate("h200-vm-1", "h200-vm-1", &[], 1).unwrap());
    let mut v = serde_json::to_value(&ev).unwrap();
    // Samples are many; their count and first value are enough here.
    for c in v["checks"].as_array_mut().unwrap() {
        for m in c["metrics"].as_array_mut().unwrap() {
            let s = m["samples"].as_array().unwrap();
            m["samples"] = serde_json::json!(format!("{} samples", s.len()));
        }
    }
    insta::assert_json_snapshot!(v);
}
