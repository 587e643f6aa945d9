//! Evidence format 3: finding subjects and fact values are typed. Certificates written with
//! format 2, whose subjects and values were text, still verify, render and read into the same
//! fields a new run writes, so that `diff` and `[baseline]` match them structurally.

mod util;

use nodecert::backend::sim::{load_node, Fault, SimBackend};
use nodecert::backend::Backend;
use nodecert::evidence::{Evidence, FactValue, Status, Subject, METHOD_FORMAT_VERSION};
use nodecert::suite::CollectiveOp;
use std::path::{Path, PathBuf};
use util::{copy_dir, read_json, Env};

/// The faults the format-2 fixture was written with (see its README).
const FAULTS: [&str; 5] = [
    "nvlink-down:gpu=2,peer=5",
    "slow-gpu-pair:gpu=1,peer=4",
    "collective-corrupt:op=all_reduce,gpu=3",
    "vbios-mismatch:gpu=5",
    "replica-mismatch:gpu=6",
];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/evidence-v2")
}

/// The fixture's node run again by this nodecert, with `faults` and the fixture's seed.
fn rerun(faults: &[&str]) -> Evidence {
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
    let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
    let inv = b.inventory().unwrap();
    let ev = nodecert::runner::new_evidence(&loaded, &b, inv, None, Default::default());
    nodecert::runner::run(&loaded, &mut b, ev, None, &mut nodecert::runner::Silent).unwrap()
}

#[test]
fn format_2_certificates_still_verify_and_render() {
    let env = Env::new();
    copy_dir(&fixture().join("cert"), &env.path("cert"));
    std::fs::copy(fixture().join("signer.key.pub"), env.path("signer.key.pub")).unwrap();
    assert_eq!(
        read_json(&env.path("cert/evidence.json"))["format_version"],
        2
    );
    env.cmd()
        .args(["verify", "cert", "--pubkey", "signer.key.pub"])
        .assert()
        .code(0);
    // A FAIL certificate renders, and its verdict is the exit code.
    env.cmd()
        .args(["render", "cert", "--out", "again"])
        .assert()
        .code(1);
    let md = env.read("again/report.md");
    assert!(md.contains("**FAIL (SIMULATED)**"), "{md}");
    // The old text subjects read back as the same words.
    for words in [
        "GPU 2 - GPU 5",
        "GPU 1 -> GPU 4",
        "all_reduce 1 GiB",
        "GPU 6",
    ] {
        assert!(md.contains(words), "{words} missing from:\n{md}");
    }
}

#[test]
fn format_2_subjects_and_facts_read_into_fields() {
    let ev = Evidence::read(&fixture().join("cert/evidence.json")).unwrap();
    let fails = |check: &str| -> Vec<Subject> {
        ev.check(check)
            .unwrap()
            .findings
            .iter()
            .filter(|f| f.status == Status::Fail)
            .map(|f| f.subject.clone())
            .collect()
    };
    assert!(fails("topology").contains(&Subject::between(2, 5)));
    assert!(fails("p2p_bandwidth").contains(&Subject::pair(1, 4)));
    assert!(fails("collective.all_reduce")
        .contains(&Subject::op_size(CollectiveOp::AllReduce, 1 << 30)));
    assert_eq!(fails("training"), vec![Subject::gpu(6)]);
    // Nothing of the fixture was left as words: every form format 2 wrote is recognised.
    for c in &ev.checks {
        for f in &c.findings {
            assert!(f.subject.label.is_none(), "{}: {:?}", c.id, f.subject);
        }
    }
    // Facts are typed: counts, element checks, copy checks, hashes.
    let coll = ev.check("collective.all_reduce").unwrap();
    let ranks = coll.facts.iter().find(|f| f.name == "ranks").unwrap();
    assert_eq!(ranks.value, FactValue::Count(8));
    let wrong: Vec<&FactValue> = coll
        .facts
        .iter()
        .filter(|f| f.name == "wrong_elements")
        .map(|f| &f.value)
        .collect();
    assert!(wrong
        .iter()
        .all(|v| matches!(v, FactValue::Elements { checked, .. } if *checked > 0)));
    assert!(wrong
        .iter()
        .any(|v| matches!(v, FactValue::Elements { wrong, .. } if *wrong > 0)));
    let p2p = ev.check("p2p_bandwidth").unwrap();
    assert!(p2p
        .facts
        .iter()
        .filter(|f| f.name.ends_with("_data"))
        .all(|f| f.value == FactValue::Copy(nodecert::evidence::CopyData::Intact)));
    let train = ev.check("training").unwrap();
    assert!(train
        .facts
        .iter()
        .filter(|f| f.name == "params_sha256")
        .all(|f| matches!(&f.value, FactValue::Sha256(h) if h.len() == 64)));
}

/// The same node, the same faults, the same seed: a format-2 certificate and a format-3 run
/// have the same findings about the same subjects, so `diff` finds no finding that appeared or
/// vanished (which is what a text-versus-fields mismatch would look like).
#[test]
fn diff_matches_format_2_findings_with_new_ones_by_their_fields() {
    let old = Evidence::read(&fixture().join("cert/evidence.json")).unwrap();
    let new = rerun(&FAULTS);
    assert_eq!(new.format_version, METHOD_FORMAT_VERSION);
    let d = nodecert::diff::compare(&old, &new, 5.0);
    // Checks the format-2 nodecert did not have (the network check) appear whole: not a
    // mismatch of subjects.
    let appeared_or_vanished: Vec<String> = d
        .verdicts
        .iter()
        .filter(|v| old.check(&v.check).is_some())
        // Nor do the training run's partitionings, which the format-2 nodecert did not run.
        .filter(|v| v.about.as_ref().is_none_or(|s| s.method.is_none()))
        // Nor the other processes on each GPU, which it did not read: they appear as new.
        .filter(|v| {
            !(v.metric.as_deref() == Some("processes") && v.old.is_none() && v.check == "health")
        })
        // Nor the outlier rule's pass of the node as a whole, which it recorded only where
        // the rule failed.
        .filter(|v| {
            !(v.old.is_none()
                && v.new == Some(nodecert::evidence::Status::Pass)
                && v.about == Some(nodecert::evidence::Subject::node())
                && ["host_bandwidth", "p2p_bandwidth", "p2p_latency", "compute"]
                    .contains(&v.check.as_str()))
        })
        .filter(|v| v.subject.is_some() && (v.old.is_none() || v.new.is_none()))
        .map(|v| v.describe())
        .collect();
    assert!(appeared_or_vanished.is_empty(), "{appeared_or_vanished:#?}");
    assert!(d.metrics_compared > 100, "{}", d.metrics_compared);
    // And a real change is still seen: the same run without the NVLink fault.
    let healed = rerun(&FAULTS[1..]);
    let d = nodecert::diff::compare(&old, &healed, 5.0);
    let link = d
        .verdicts
        .iter()
        .find(|v| v.check == "topology" && v.about == Some(Subject::between(2, 5)))
        .unwrap_or_else(|| panic!("{:#?}", d.verdicts));
    assert_eq!(
        (link.old, link.new),
        (Some(Status::Fail), Some(Status::Pass))
    );
}

#[test]
fn a_new_run_writes_typed_subjects_and_values() {
    let env = Env::new();
    let mut args = vec!["run", "h100-sxm-8", "--simulate", "h100-sxm-8", "-q"];
    for f in &FAULTS[..2] {
        args.extend(["--inject", f]);
    }
    args.extend(["--out", "out"]);
    env.cmd().args(&args).assert().code(1);
    let v = read_json(&env.path("out/evidence.json"));
    assert_eq!(v["format_version"], METHOD_FORMAT_VERSION);
    let topo = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "topology")
        .unwrap();
    let failed: Vec<&serde_json::Value> = topo["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| &f["subject"])
        .collect();
    assert!(
        failed.contains(&&serde_json::json!({"gpu": 2, "peer": 5, "pairing": "relation"})),
        "{failed:?}"
    );
    let coll = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "collective.all_reduce")
        .unwrap();
    let ranks = coll["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "ranks")
        .unwrap();
    assert_eq!(ranks["value"], serde_json::json!({"count": 8}));
    // Templates still see words: the report names the pair as people read it, in the
    // findings table that templates fill from the evidence itself.
    assert!(env.read("out/report.md").contains("GPU 2 - GPU 5"));
    assert!(env
        .read("out/report.html")
        .contains("<td>GPU 2 - GPU 5</td>"));
}
