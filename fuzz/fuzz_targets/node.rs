//! Simulated node files come from users: whatever one holds loads or is refused in words; a
//! node that loads is inventoried, frozen into a suite that loads again, and certified against
//! the base suite, never a panic or a hang.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nodecert::backend::Backend;
use nodecert::config::Source;
use std::sync::OnceLock;

fn base() -> &'static nodecert::suite::load::LoadedSuite {
    static BASE: OnceLock<nodecert::suite::load::LoadedSuite> = OnceLock::new();
    BASE.get_or_init(|| nodecert::suite::load::load("base").expect("the base suite loads"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let src = Source {
        name: "fuzz-node.toml".into(),
        text: text.into(),
    };
    let Ok(node) = nodecert::backend::sim::load_node_source(&src) else {
        return;
    };
    let Ok(mut b) = nodecert::backend::sim::SimBackend::new(node, vec![], 1) else {
        return;
    };
    let Ok(inv) = b.inventory() else {
        return;
    };
    let _ = nodecert::inventory_text::render(&inv, true);
    if nodecert::commands::inventory::not_freezable(&inv).is_none() {
        let frozen = nodecert::suite::freeze::suite_from_inventory(&inv, true);
        let src = Source {
            name: "frozen.toml".into(),
            text: frozen.clone(),
        };
        if let Err(e) = nodecert::suite::load::load_source(src) {
            panic!("a frozen suite does not load: {e}\n{frozen}");
        }
    }
    let suite = base();
    if nodecert::checks::check_evidence_size(suite, inv.gpus.len()).is_err() {
        return;
    }
    let rec = b.record();
    let ev = nodecert::runner::new_evidence(
        suite,
        &b,
        inv,
        Some(rec),
        nodecert::evidence::Environment::default(),
    );
    let ev = nodecert::runner::run(suite, &mut b, ev, None, &mut nodecert::runner::Silent)
        .expect("a run in memory");
    assert!(ev.non_finite().is_none());
    let text = serde_json::to_string(&ev).expect("evidence serializes");
    let back = nodecert::evidence::Evidence::from_text(std::path::Path::new("ev.json"), &text)
        .expect("evidence of a run reads back");
    assert_eq!(back.verdict, ev.verdict);
    nodecert::report::render(&back, None, &Default::default()).expect("renders");
});
