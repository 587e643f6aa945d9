//! `nodecert inventory`: what the node is, as text, JSON, or a suite that freezes it.

use super::backend;
use crate::error::{exit, Error, InputError, Result};
use std::path::Path;

pub fn cmd_inventory(
    simulate: Option<String>,
    json: bool,
    as_suite: Option<&Path>,
    force: bool,
) -> Result<u8> {
    if let Some(path) = as_suite.filter(|p| *p != Path::new("-")) {
        let refuse = |why: String| -> Result<u8> {
            Err(InputError::Other(format!("--as-suite {}: {why}", path.display())).into())
        };
        if let Err(why) = crate::fsio::write::check_target(path) {
            return refuse(why.to_string());
        }
        if path.symlink_metadata().is_ok() && !force {
            return refuse(
                "exists; a frozen suite is never replaced silently: add --force to replace it"
                    .into(),
            );
        }
    }
    let (mut b, simrec) = backend(simulate.as_deref(), &[], 1, None)?;
    let inv = b.inventory()?;
    if let (Some(_), Some(why)) = (as_suite, not_freezable(&inv)) {
        crate::errln!("error: not freezing this node: {why}");
        return Ok(exit::CHECK_FAILED);
    }
    if let Some(path) = as_suite {
        let text = crate::suite::freeze::suite_from_inventory(&inv, simrec.is_some());
        if path == Path::new("-") {
            crate::out!("{text}");
        } else {
            // Without --force, a file that appeared while the node was read is not replaced
            // either: the write itself refuses an existing name.
            let written = if force {
                crate::fsio::write::replace(path, text.as_bytes())
            } else {
                crate::fsio::write::create_new(path, text.as_bytes(), 0o644)
            };
            match written {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(InputError::Other(format!(
                        "--as-suite {}: exists; a frozen suite is never replaced silently: add \
                         --force to replace it",
                        path.display()
                    ))
                    .into());
                }
                r => r.map_err(|e| Error::Write {
                    path: path.to_path_buf(),
                    source: e,
                })?,
            }
            crate::outln!("wrote a suite that expects this node: {}", path.display());
        }
    } else if json {
        let v = serde_json::json!({ "simulated": simrec.is_some(), "inventory": inv });
        let text = serde_json::to_string_pretty(&v).unwrap_or_default();
        crate::outln!("{}", crate::console::json_visible(&text));
    } else {
        crate::out!("{}", crate::inventory_text::render(&inv, simrec.is_some()));
    }
    Ok(exit::PASS)
}

/// Why a suite must not be frozen from `inv`: it would expect the node in a broken shape.
pub fn not_freezable(inv: &crate::inventory::Inventory) -> Option<String> {
    if !inv.lost_gpus.is_empty() {
        // The suite would expect the broken shape, and its per-GPU lists would be shifted.
        let lost: Vec<String> = inv.lost_gpus.iter().map(|l| l.label()).collect();
        return Some(format!(
            "{} fell off the bus, and a suite written now would expect the node without it; \
             reset or repair the GPU first (`nodecert inventory` lists it)",
            lost.join(", ")
        ));
    }
    if let Some(why) = crate::suite::freeze::hidden_in_values(inv) {
        return Some(why);
    }
    // A model or memory size not read: the suite would expect "unknown GPU" or 0 GiB.
    use crate::inventory::Reading;
    let unknown: Vec<String> = inv
        .gpus
        .iter()
        .filter(|g| !g.gives(Reading::Model) || !g.gives(Reading::Memory))
        .map(|g| format!("GPU {}", g.index))
        .collect();
    if !unknown.is_empty() {
        return Some(format!(
            "the model or memory size of {} could not be read, and a suite written now would \
             expect it unknown; see the inventory's notes",
            unknown.join(", ")
        ));
    }
    // Links not all read: the suite would expect the pairs of that GPU with the links it saw.
    let unread = inv.links_unread();
    if !unread.is_empty() {
        return Some(format!(
            "the NVLink state of {} could not be read, and a suite written now would expect {} \
             pairs with the links seen; see the inventory's notes",
            unread.join(", "),
            if unread.len() == 1 { "its" } else { "their" }
        ));
    }
    // NICs that did not answer are unknown: a suite written now would state no fabric.
    let no = inv.fabric.as_ref()?.no_answer.as_ref()?;
    Some(format!(
        "{}; a suite written now would expect no NIC",
        no.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    /// A model or memory size not read would be frozen as "unknown GPU" or 0 GiB: refused.
    #[test]
    fn a_node_whose_model_or_memory_was_not_read_is_not_frozen() {
        use crate::inventory::Reading;
        for r in [Reading::Model, Reading::Memory] {
            let node = crate::backend::sim::load_node("h100-sxm-8").unwrap();
            let mut b = crate::backend::sim::SimBackend::new(node, vec![], 1).unwrap();
            let mut inv = b.inventory().unwrap();
            assert_eq!(not_freezable(&inv), None);
            crate::backend::sim::hide_for_tests(&mut inv.gpus[6], r);
            let why = not_freezable(&inv).unwrap();
            assert!(
                why.starts_with("the model or memory size of GPU 6 could not be read"),
                "{why}"
            );
        }
    }

    #[test]
    fn a_node_whose_nics_did_not_answer_is_not_frozen() {
        let node = crate::backend::sim::load_node("h100-sxm-8").unwrap();
        let mut b = crate::backend::sim::SimBackend::new(node, vec![], 1).unwrap();
        let mut inv = b.inventory().unwrap();
        assert_eq!(not_freezable(&inv), None);
        let no = crate::network::NoAnswer {
            file: "/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error".into(),
            nic: Some("mlx5_3".into()),
            port: Some(1),
            waited_s: 5.0,
        };
        inv.fabric.as_mut().unwrap().no_answer = Some(no.clone());
        assert_eq!(
            not_freezable(&inv),
            Some(format!(
                "{}; a suite written now would expect no NIC",
                no.describe()
            ))
        );
    }

    #[test]
    fn a_node_whose_link_state_was_not_read_is_not_frozen() {
        let node = crate::backend::sim::load_node("h100-sxm-8").unwrap();
        let mut b = crate::backend::sim::SimBackend::new(node, vec![], 1).unwrap();
        let mut inv = b.inventory().unwrap();
        inv.gpus[5]
            .unavailable
            .push(crate::inventory::Reading::NvlinkState);
        assert_eq!(
            not_freezable(&inv).unwrap(),
            "the NVLink state of GPU 5 could not be read, and a suite written now would expect \
             its pairs with the links seen; see the inventory's notes"
        );
    }

    #[test]
    fn a_node_whose_gpu_name_hides_text_is_not_frozen() {
        let node = crate::backend::sim::load_node("h100-sxm-8").unwrap();
        let mut b = crate::backend::sim::SimBackend::new(node, vec![], 1).unwrap();
        let mut inv = b.inventory().unwrap();
        inv.gpus
            .iter_mut()
            .for_each(|g| g.name = "NVIDIA H100\u{2067}".into());
        let why = not_freezable(&inv).unwrap();
        assert!(why.starts_with("GPU 0 reports the name"), "{why}");
    }
}
