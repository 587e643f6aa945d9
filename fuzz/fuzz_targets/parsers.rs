//! The small parsers of what the node, the scheduler and the command line give: the first byte
//! picks one, the rest is its text. Each returns a value or None/an error, never a panic or a
//! hang, whatever the text.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 16 == 15 {
        // Raw bytes: a PCI device's config space.
        let _ = nodecert::platform::pci::parse_acs(rest);
        let _ = nodecert::platform::hypervisor::signature_text(rest);
        return;
    }
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match pick % 16 {
        0 => {
            for r in nodecert::backend::real::xid::parse_kernel_log(text) {
                let _ = format!("{r:?}");
            }
        }
        1 => {
            if let Ok(names) = nodecert::fleet::hostlist::expand(text) {
                assert!(names.len() <= nodecert::fleet::hostlist::MAX_NAMES);
            }
        }
        2 => {
            if let Some(cpus) = nodecert::platform::numa::parse_cpulist(text) {
                let again = nodecert::platform::numa::cpulist_text(&cpus);
                let mut sorted = cpus.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(
                    nodecert::platform::numa::parse_cpulist(&again),
                    Some(sorted)
                );
            }
        }
        3 => {
            let _ = nodecert::backend::cuda::parse_nccl_conf(text);
        }
        4 => {
            let _ = nodecert::backend::cuda::libs::parse_ldconfig(text);
        }
        5 => {
            let _ = nodecert::fleet::slurm::parse_reasons(text);
        }
        6 => {
            if let Ok(m) = nodecert::sign::Manifest::parse(text) {
                let again = m.render();
                nodecert::sign::Manifest::parse(&again).expect("a rendered manifest parses");
            }
        }
        7 => {
            let _ = nodecert::backend::sim::Fault::parse(text);
        }
        8 => {
            // Shown for people, rounded to one decimal ("74.5 GiB"); shown without a decimal it
            // is exact, and reads back as itself (what `fleet baseline` writes into suites).
            if let Ok(b) = nodecert::units::ByteSize::parse(text) {
                let shown = b.to_string();
                if !shown.contains('.') {
                    assert_eq!(nodecert::units::ByteSize::parse(&shown), Ok(b), "{text:?}");
                }
            }
        }
        9 => {
            let _ = nodecert::suite::parse_version(text);
        }
        10 => {
            if let Some(r) = nodecert::network::parse_rate(text) {
                assert!(r.is_finite(), "{text:?} gave {r}");
            }
        }
        11 => {
            let _ = nodecert::backend::cuda::parse_timeout(text);
        }
        12 => {
            let _ = nodecert::fleet::simulate::parse_inject(text);
        }
        13 => {
            let _ = nodecert::fleet::slurm::reason(text);
            let _ = nodecert::fleet::slurm::sh(text);
        }
        _ => {
            let _ = nodecert::fleet::natural_cmp(text, "node10");
            let _ = nodecert::backend::real::xid::parse_kernel_line(text);
        }
    }
});
