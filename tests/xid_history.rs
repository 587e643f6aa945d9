//! Old XIDs are history, not a failure: a kernel-log XID is judged when it was logged within the
//! suite's look-back window before the run (or during it, or at an unknown time).

use nodecert::evidence::{Evidence, Status};

fn health(ev: &Evidence) -> &nodecert::evidence::CheckRecord {
    ev.check("health").expect("a health check")
}

fn xid_findings(ev: &Evidence) -> Vec<(Status, String)> {
    health(ev)
        .findings
        .iter()
        .filter(|f| f.reason.contains("XID") && f.status != Status::Pass)
        .map(|f| (f.status, f.reason.clone()))
        .collect()
}

#[test]
fn an_xid_from_weeks_ago_is_history_and_does_not_fail_the_node() {
    let ev = nodecert::runner::simulate(
        "h100-sxm-8",
        "h100-sxm-8",
        &["xid:gpu=2,code=79,age_h=500"],
        1,
    )
    .unwrap();
    assert_eq!(
        health(&ev).status,
        Status::Warn,
        "{:#?}",
        health(&ev).findings
    );
    let x = xid_findings(&ev);
    assert_eq!(x.len(), 1, "{x:?}");
    assert_eq!(x[0].0, Status::Warn);
    assert!(
        x[0].1
            .starts_with("GPU 2: history, not judged: XID 79 (kernel log, 20.8 d ago)"),
        "{}",
        x[0].1
    );
    assert!(x[0].1.ends_with("before the 24 h look-back"), "{}", x[0].1);
}

#[test]
fn an_xid_within_the_look_back_or_during_the_run_fails() {
    for fault in [
        "xid:gpu=2,code=79,age_h=2",
        "xid:gpu=2,code=79,age_h=24",
        "xid:gpu=2,code=79",
    ] {
        let ev = nodecert::runner::simulate("h100-sxm-8", "h100-sxm-8", &[fault], 1).unwrap();
        assert_eq!(health(&ev).status, Status::Fail, "{fault}");
        let x = xid_findings(&ev);
        assert!(
            x.iter()
                .any(|(s, r)| *s == Status::Fail && r.starts_with("GPU 2: XID 79")),
            "{fault}: {x:?}"
        );
    }
    let ev = nodecert::runner::simulate(
        "h100-sxm-8",
        "h100-sxm-8",
        &["xid:gpu=2,code=79,age_h=2"],
        1,
    )
    .unwrap();
    let x = xid_findings(&ev);
    assert!(
        x[0].1.contains("(kernel log, 2.0 h before the run)"),
        "{x:?}"
    );
}

#[test]
fn the_suite_sets_the_look_back() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, hours: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "format_version = 1\nname = \"lookback\"\nextends = \"h100-sxm-8\"\n\n\
                 [checks.health]\nxid_lookback_h = {hours}\n"
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let week = write("week.toml", "168");
    let ev = nodecert::runner::simulate(&week, "h100-sxm-8", &["xid:gpu=2,code=79,age_h=100"], 1)
        .unwrap();
    assert_eq!(health(&ev).status, Status::Fail);
    // 0: this run only; an XID logged an hour before is history.
    let now = write("now.toml", "0");
    let ev =
        nodecert::runner::simulate(&now, "h100-sxm-8", &["xid:gpu=2,code=79,age_h=1"], 1).unwrap();
    assert_eq!(health(&ev).status, Status::Warn);
    let ev = nodecert::runner::simulate(&now, "h100-sxm-8", &["xid:gpu=2,code=79"], 1).unwrap();
    assert_eq!(health(&ev).status, Status::Fail);
    for bad in ["-1", "nan", "1e9"] {
        let p = write("bad.toml", bad);
        let e = nodecert::runner::simulate(&p, "h100-sxm-8", &[], 1).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad}");
        assert!(e.to_string().contains("xid_lookback_h"), "{bad}: {e}");
    }
}

#[test]
fn an_xid_age_must_be_a_number() {
    for bad in [
        "xid:age_h=-3",
        "xid:age_h=x",
        "xid:age_h=inf",
        // Not truncated into XID 79.
        "xid:code=4294967375",
    ] {
        let e = nodecert::runner::simulate("h100-sxm-8", "h100-sxm-8", &[bad], 1).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad}");
    }
}
