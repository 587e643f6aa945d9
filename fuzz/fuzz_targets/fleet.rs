//! fleet.json comes from anyone (`fleet --compare`, `verify`): whatever it holds is refused in
//! words or read, never a panic or a hang.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((report, _)) =
        nodecert::fleet::FleetReport::from_text(std::path::Path::new("fleet.json"), text.into())
    else {
        return;
    };
    nodecert::fleet::render::render(&report, &Default::default())
        .expect("a fleet that reads renders");
    let _ = nodecert::fleet::k8s::drain_plan(&report);
    let _ = nodecert::fleet::slurm::drain_plan(&report, &[]);
});
