//! Evidence files come from anyone (`render`, `verify`, `diff`, `fleet` read them): whatever
//! they hold is read within bounds, refused in words, or rendered, diffed and exported, never a
//! panic or a hang.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(ev) = nodecert::evidence::Evidence::from_text(Path::new("fuzz.json"), text) else {
        return;
    };
    nodecert::report::render(&ev, None, &Default::default()).expect("evidence that reads renders");
    let _ = nodecert::export::junit::render(&ev);
    let _ = nodecert::export::prometheus::render(&ev);
    let d = nodecert::diff::compare(&ev, &ev, 5.0);
    nodecert::report::render_diff(&d).expect("a diff of evidence that reads renders");
    // What reads is what nodecert writes: written again, it reads back to the same verdict.
    let again = serde_json::to_string(&ev).expect("evidence serializes");
    let back = nodecert::evidence::Evidence::from_text(Path::new("again.json"), &again)
        .expect("evidence written again reads back");
    assert_eq!(back.verdict, ev.verdict);
});
