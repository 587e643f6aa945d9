//! Property tests (issue 13): whatever text a suite, a simulated node description or an evidence
//! file holds (random bytes, TOML built from the real keys with hostile values, real files
//! mutated), loading it ends within a time bound with a value or an error that says something
//! (exit 2), never a panic. What loads is then used: suites and nodes run on the simulator, and
//! the evidence they leave reads back and renders.
//!
//! Case counts keep the whole file to seconds (`PROPTEST_CASES` raises them for a longer hunt).

use nodecert::backend::sim::{load_node_source, Fault, SimBackend, SimNode};
use nodecert::backend::Backend;
use nodecert::config::Source;
use nodecert::error::{Error, InputError};
use nodecert::evidence::{Environment, Evidence, SimulationRecord};
use nodecert::suite::load::{load_source, LoadedSuite};
use proptest::prelude::*;
use std::time::{Duration, Instant};

/// What one load (or one load and run) may take, far above what it takes.
const BOUND: Duration = Duration::from_secs(20);

fn cases(n: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    ProptestConfig {
        cases: n,
        // A failure is shrunk briefly: enough to read, not minutes of CI.
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

/// An input error says what and (when it has one) where, and maps to exit 2.
fn check_input_error(e: InputError) -> Result<(), TestCaseError> {
    let text = e.to_string();
    prop_assert!(!text.trim().is_empty(), "an empty message");
    if let InputError::Located { location, .. } = &e {
        prop_assert!(location.line >= 1 && location.column >= 1, "{text}");
    }
    prop_assert_eq!(Error::Input(e).exit_code(), 2);
    Ok(())
}

fn source(name: &str, text: String) -> Source {
    Source {
        name: name.into(),
        text,
    }
}

/// The keys of a suite, by table ("" is the top level).
const SUITE_KEYS: &[(&str, &str)] = &[
    ("", "extends"),
    ("", "description"),
    ("node", "gpu_count"),
    ("node", "gpu_model"),
    ("node", "memory_gib_min"),
    ("node", "driver_min"),
    ("node", "virtualization"),
    ("topology", "nvlinks_per_pair"),
    ("topology", "nvlink_pairs"),
    ("topology", "nvswitch"),
    ("topology", "pcie_gen"),
    ("topology", "pcie_width"),
    ("topology", "numa_nodes"),
    ("checks.topology", "enabled"),
    ("checks.virtualization", "require_p2p"),
    ("checks.health", "max_uncorrectable"),
    ("checks.health", "xid_lookback_h"),
    ("checks.health", "fail_throttle"),
    ("checks.health", "fail_xids"),
    ("checks.health", "warn_temperature_c"),
    ("checks.health", "driver_min"),
    ("checks.host_bandwidth", "size"),
    ("checks.host_bandwidth", "iterations"),
    ("checks.host_bandwidth", "warmup"),
    ("checks.host_bandwidth", "h2d"),
    ("checks.host_bandwidth", "device_copy"),
    ("checks.host_bandwidth", "outlier_pct"),
    ("checks.p2p_bandwidth", "size"),
    ("checks.p2p_bandwidth", "read"),
    ("checks.p2p_bandwidth", "iterations"),
    ("checks.p2p_bandwidth", "require_peer_access"),
    ("checks.p2p_bandwidth", "remeasure"),
    ("checks.p2p_latency", "latency_us"),
    ("checks.p2p_latency", "iterations"),
    ("checks.p2p_latency", "outlier_pct"),
    ("checks.collective.all_reduce", "min_size"),
    ("checks.collective.all_reduce", "max_size"),
    ("checks.collective.all_reduce", "factor"),
    ("checks.collective.all_reduce", "iterations"),
    ("checks.collective.all_reduce", "min_busbw_gbps"),
    ("checks.collective.all_reduce", "remeasure"),
    ("checks.collective.all_to_all", "warn_busbw_gbps"),
    ("checks.collective.all_to_all", "min_fraction_of_p2p"),
    ("checks.training", "enabled"),
    ("checks.training", "layers"),
    ("checks.training", "batch"),
    ("checks.training", "steps"),
    ("checks.training", "precision"),
    ("checks.training", "lr"),
    ("checks.training", "loss_target"),
    ("checks.training", "golden_layers"),
    ("checks.training", "golden_batch"),
    ("checks.training", "golden_lr"),
    ("checks.training", "golden_steps"),
    ("checks.training", "golden_rel_tol"),
    ("checks.training", "golden_abs_tol"),
    ("checks.training", "samples_per_s"),
    ("checks.training", "min_scaling_efficiency"),
    ("baseline", "max_regression_pct"),
];

/// Values a careless or hostile author writes.
const HOSTILE: &[&str] = &[
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1",
    "2",
    "8",
    "1e30",
    "-1e30",
    "1e-300",
    "0.5",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "65536",
    "true",
    "\"\"",
    "\"99999TiB\"",
    "\"0B\"",
    "\"8GiB\"",
    "\"1.5KiB\"",
    "\"\\u001b[2J PASS\\nx\"",
    "\"535.104\"",
    "\"h100-sxm-8\"",
    "\"base\"",
    "\"/dev/zero\"",
    "\"bf16\"",
    "\"any\"",
    "[]",
    "[0, 0]",
    "[-1, 1]",
    "[65536, 65536, 65536, 10]",
    "[4294967296, 10]",
    "[64, 10]",
    "[79, 79, 4294967295]",
    "[\"hw_slowdown\", \"nope\"]",
    "[{ a = 0, b = 1, links = 99 }]",
    "[{ a = 0, b = 70, links = 1 }]",
    "{}",
    "{ fail_below = nan }",
    "{ fail_below = 9.0, fail_above = 1.0 }",
    "{ warn_below = 1e300 }",
    "{ fail_above = 5.0, warn_above = 9.0 }",
    "{ \"99999TiB\" = 3 }",
    "{ \"8B\" = -1 }",
    "{ \"1MiB\" = 1.0 }",
];

/// TOML text from (key, value) choices: top-level keys first, then one header per table.
fn suite_text(choices: &[(usize, usize)]) -> String {
    let mut tables: Vec<(&str, Vec<(&str, &str)>)> = Vec::new();
    for &(k, v) in choices {
        let (table, key) = SUITE_KEYS[k % SUITE_KEYS.len()];
        let value = HOSTILE[v % HOSTILE.len()];
        match tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, kv)) if kv.iter().any(|(k, _)| *k == key) => {}
            Some((_, kv)) => kv.push((key, value)),
            None => tables.push((table, vec![(key, value)])),
        }
    }
    tables.sort_by_key(|(t, _)| !t.is_empty());
    let mut s = String::from("format_version = 1\nname = \"generated\"\n");
    for (table, kv) in tables {
        if !table.is_empty() {
            s.push_str(&format!("[{table}]\n"));
        }
        for (k, v) in kv {
            s.push_str(&format!("{k} = {v}\n"));
        }
    }
    s
}

/// One edit of a real file: delete a run of characters, or put a hostile token in.
#[derive(Debug, Clone)]
enum Edit {
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        token: usize,
    },
    /// Replace the value of the n-th `key = value` line.
    Value {
        line: usize,
        token: usize,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), any::<usize>()).prop_map(|(at, token)| Edit::Insert { at, token }),
        (any::<usize>(), any::<usize>()).prop_map(|(line, token)| Edit::Value { line, token }),
    ]
}

/// Apply edits to a text, on character boundaries.
fn mutate(text: &str, edits: &[Edit], tokens: &[&str]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        match *e {
            Edit::Delete { at, len } if !chars.is_empty() => {
                let at = at % chars.len();
                let end = (at + len).min(chars.len());
                chars.drain(at..end);
            }
            Edit::Delete { .. } => {}
            Edit::Insert { at, token } => {
                let at = at % (chars.len() + 1);
                let t = tokens[token % tokens.len()];
                chars.splice(at..at, t.chars());
            }
            Edit::Value { line, token } => {
                let s: String = chars.iter().collect();
                let lines: Vec<&str> = s.lines().collect();
                let values: Vec<usize> = (0..lines.len())
                    .filter(|i| lines[*i].contains(" = ") && !lines[*i].starts_with('#'))
                    .collect();
                if values.is_empty() {
                    continue;
                }
                let i = values[line % values.len()];
                let key = lines[i].split(" = ").next().unwrap_or("");
                let t = tokens[token % tokens.len()];
                let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                out[i] = format!("{key} = {t}");
                chars = out.join("\n").chars().collect();
            }
        }
    }
    chars.into_iter().collect()
}

/// A small suite that takes every check but training through a simulated node.
const RUN_SUITE: &str = r#"format_version = 1
name = "props"
[checks.topology]
[checks.virtualization]
[checks.health]
[checks.host_bandwidth]
iterations = 3
warmup = 0
[checks.p2p_bandwidth]
iterations = 3
warmup = 0
[checks.p2p_latency]
iterations = 3
[checks.collective.all_reduce]
max_size = "1MiB"
factor = 16
iterations = 2
"#;

/// Run a loaded suite on a node, write its evidence, read it back, render it.
fn run_and_read_back(
    suite: &LoadedSuite,
    node: SimNode,
    faults: Vec<Fault>,
) -> Result<(), TestCaseError> {
    let mut b = match SimBackend::new(node, faults, 7) {
        Ok(b) => b,
        Err(e) => return check_input_error(e),
    };
    let inv = match b.inventory() {
        Ok(inv) => inv,
        // Every GPU lost: the node cannot be tested (exit 3), said in words.
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };
    // As `run` does: a plan whose evidence could not be read back is refused first.
    if let Err(e) = nodecert::checks::check_evidence_size(suite, inv.gpus.len()) {
        return check_input_error(e);
    }
    let ev =
        nodecert::runner::new_evidence(suite, &b, inv, Some(record(&b)), Environment::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evidence.json");
    let ev = nodecert::runner::run(
        suite,
        &mut b,
        ev,
        Some(&nodecert::fsio::write::Dir::open(dir.path()).unwrap()),
        &mut nodecert::runner::Silent,
    )
    .map_err(|e| TestCaseError::fail(format!("evidence not written: {e}")))?;
    prop_assert!(ev.non_finite().is_none());
    let back = Evidence::read(&path).map_err(TestCaseError::fail)?;
    prop_assert_eq!(back.verdict, ev.verdict);
    nodecert::report::render(&back, None, &Default::default())
        .map_err(|e| TestCaseError::fail(format!("render: {e}")))?;
    Ok(())
}

/// The simulation record a simulated run carries (as the command line writes it).
fn record(b: &SimBackend) -> SimulationRecord {
    b.record()
}

fn load_suite_bounded(text: String) -> Result<Option<LoadedSuite>, TestCaseError> {
    let t = Instant::now();
    let r = load_source(source("generated.toml", text));
    prop_assert!(t.elapsed() < BOUND, "loading took {:?}", t.elapsed());
    match r {
        Ok(l) => {
            // What loads keeps its promise to the runner: the checks it lists are those run.
            let ran: Vec<String> = nodecert::checks::from_suite(&l)
                .iter()
                .map(|c| c.id())
                .collect();
            prop_assert_eq!(ran, l.suite.promised_checks());
            Ok(Some(l))
        }
        Err(e) => check_input_error(e).map(|_| None),
    }
}

fn embedded_node(name: &str) -> SimNode {
    nodecert::backend::sim::load_node(name).expect("embedded node loads")
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn random_bytes_as_a_suite(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        load_suite_bounded(String::from_utf8_lossy(&bytes).into_owned())?;
    }

    #[test]
    fn random_bytes_as_a_node_file(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Err(e) = load_node_source(&source("node.toml", text)) {
            check_input_error(e)?;
        }
    }

    #[test]
    fn random_bytes_as_evidence(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("evidence.json");
        std::fs::write(&path, &bytes).unwrap();
        let t = Instant::now();
        let r = Evidence::read(&path);
        prop_assert!(t.elapsed() < BOUND);
        prop_assert!(r.is_err(), "random bytes read as evidence");
        prop_assert!(!r.unwrap_err().is_empty());
    }

    #[test]
    fn suites_from_real_keys_with_hostile_values(
        choices in proptest::collection::vec((any::<usize>(), any::<usize>()), 0..14)
    ) {
        load_suite_bounded(suite_text(&choices))?;
    }

    #[test]
    fn faults_from_the_command_line(spec in "[a-z-]{0,20}(:[a-z_]{0,6}=[-0-9a-z.e+]{0,24}(,[a-z_]{0,6}=[-0-9a-z.e+]{0,24}){0,3})?") {
        if let Ok(f) = Fault::parse(&spec) {
            // What parses is possible on some node, or refused by the node it is put on.
            if let Err(e) = SimBackend::new(embedded_node("h200-vm-1"), vec![f], 1) {
                check_input_error(e)?;
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(48))]

    /// Real suites, edited: what still loads runs on the simulator (without the training run,
    /// whose golden half is trained on the CPU) and leaves evidence that reads back.
    #[test]
    fn mutated_real_suites(
        which in 0usize..6,
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let (name, text) = nodecert::suite::load::EMBEDDED[which];
        let text = mutate(text, &edits, HOSTILE);
        if let Some(mut l) = load_suite_bounded(text)? {
            l.suite.checks.training = None;
            l.baseline = None;
            l.suite.baseline = None;
            let node = if name == "base" { "h100-sxm-8" } else { name };
            let t = Instant::now();
            run_and_read_back(&l, embedded_node(node), vec![])?;
            prop_assert!(t.elapsed() < BOUND, "the run took {:?}", t.elapsed());
        }
    }

    /// Real node files, edited: what still loads is a node the simulator can run a suite on
    /// (inventory, copies, collectives), and the evidence reads back.
    #[test]
    fn mutated_real_node_files(
        which in 0usize..5,
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let text = nodecert::backend::sim::EMBEDDED[which].1;
        let text = mutate(text, &edits, HOSTILE);
        let t = Instant::now();
        match load_node_source(&source("node.toml", text)) {
            Ok(node) => {
                let suite = load_source(source("props.toml", RUN_SUITE.into())).unwrap();
                run_and_read_back(&suite, node, vec![])?;
            }
            Err(e) => check_input_error(e)?,
        }
        prop_assert!(t.elapsed() < BOUND, "took {:?}", t.elapsed());
    }

    /// nodecert's own evidence, edited (numbers made null, huge, negative, strings; text cut):
    /// reading it gives evidence that renders, or an error that says why.
    #[test]
    fn mutated_real_evidence(edits in proptest::collection::vec(edit(), 1..4)) {
        const JSON_TOKENS: &[&str] = &[
            "null", "1e999", "-1", "NaN", "\"x\"", "[]", "{}", "true", "18446744073709551616",
            "\"format_version\": 0,", "\"simulated\": false,", "\"verdict\": \"pass\",",
        ];
        let text = evidence_text();
        let text = mutate(&text, &edits, JSON_TOKENS);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("evidence.json");
        std::fs::write(&path, text).unwrap();
        let t = Instant::now();
        match Evidence::read(&path) {
            // Rendering evidence that reads: pages, or an error that says why.
            Ok(ev) => {
                if let Err(e) = nodecert::report::render(&ev, None, &Default::default()) {
                    prop_assert!(!e.is_empty());
                }
            }
            Err(e) => prop_assert!(!e.is_empty()),
        }
        prop_assert!(t.elapsed() < BOUND, "took {:?}", t.elapsed());
    }
}

/// Evidence of a simulated run, as nodecert writes it (once per test process).
fn evidence_text() -> String {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let suite = load_source(source("props.toml", RUN_SUITE.into())).unwrap();
        let mut b = SimBackend::new(embedded_node("l40s-pcie-4"), vec![], 3).unwrap();
        let inv = b.inventory().unwrap();
        let rec = Some(record(&b));
        let ev = nodecert::runner::new_evidence(&suite, &b, inv, rec, Environment::default());
        let ev =
            nodecert::runner::run(&suite, &mut b, ev, None, &mut nodecert::runner::Silent).unwrap();
        serde_json::to_string_pretty(&ev).unwrap()
    })
    .clone()
}
