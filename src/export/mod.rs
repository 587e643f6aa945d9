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
    crate::evidence::write_atomic(path, exporter.render(ev).as_bytes())
}
