//! Machine outputs of a run, one file per format: JUnit XML for CI test reports
//! ([`junit::Junit`]) and the Prometheus text exposition format for node_exporter's textfile
//! collector ([`prometheus::Prometheus`]). Like the reports, each is a pure function of the
//! evidence, so `nodecert render` can write them again from an old evidence.json.

pub mod junit;
pub mod prometheus;

use crate::evidence::Evidence;
use std::path::Path;

/// One output format.
pub trait Exporter {
    /// The command-line flag that asks for it, for messages ("--junit").
    fn flag(&self) -> &'static str;
    /// The whole file.
    fn render(&self, ev: &Evidence) -> String;
}

/// Render and write atomically (a temp file in the same folder, then a rename), so a collector
/// never reads half a file.
pub fn write(exporter: &dyn Exporter, ev: &Evidence, path: &Path) -> std::io::Result<()> {
    crate::fsio::write::replace(path, exporter.render(ev).as_bytes())
}

/// Whether `head` (the start of a file that exists at an export's target) is what that export
/// wrote before: such a file is replaced without `--force` (a textfile collector's file is
/// rewritten on every run), anything else is not.
pub fn is_previous_output(exporter: &dyn Exporter, head: &str) -> bool {
    match exporter.flag() {
        "--junit" => {
            head.starts_with("<?xml")
                && (head.contains("<testsuites name=\"nodecert\"")
                    || head.contains("<testsuites name=\"[SIMULATED] nodecert\""))
        }
        "--prometheus" => head.starts_with("# HELP nodecert_"),
        _ => false,
    }
}
