//! Suites come from users: whatever a suite file holds loads or is refused in words that say
//! where, never a panic or a hang, and what loads lists the checks it runs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nodecert::config::Source;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let src = Source {
        name: "fuzz.toml".into(),
        text: text.into(),
    };
    match nodecert::suite::load::load_source(src) {
        Ok(l) => {
            let ran: Vec<String> = nodecert::checks::from_suite(&l)
                .iter()
                .map(|c| c.id())
                .collect();
            assert_eq!(ran, l.suite.promised_checks());
        }
        Err(e) => assert!(!e.to_string().trim().is_empty()),
    }
});
