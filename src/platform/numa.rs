//! Host memory next to its GPU: pin a GPU's host buffers on the GPU's own NUMA node.
//!
//! On a two-socket node, pinned memory allocated by a thread that runs on the other socket lands
//! on that socket's memory, and every host copy of the GPU then crosses the socket link: a false
//! alarm on a healthy node. [`LocalTo`] binds the calling thread to the GPU's CPUs
//! (`sched_setaffinity`) and prefers the GPU's node for new pages (`set_mempolicy`) while the
//! buffer is allocated and first touched, then restores both; [`page_node`] asks the kernel
//! where a page really is (`get_mempolicy` with `MPOL_F_NODE | MPOL_F_ADDR`), so the evidence
//! records the placement, not the intention.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Where a GPU's pinned host buffers were placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HostPlacement {
    /// The GPU's NUMA node (sysfs `numa_node` of its PCI device); None: not reported (a VM).
    pub gpu_node: Option<i32>,
    /// The CPUs the allocating thread was bound to (the GPU's `local_cpulist`); None: not bound.
    pub bound_cpus: Option<String>,
    /// The NUMA node the kernel reports for the buffer's first and last pages; None: it did not
    /// say (no NUMA support, or the query was refused).
    pub pages_node: Option<i32>,
    /// The first and last pages lie on different nodes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split: bool,
    /// Why binding or the query did not happen, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl HostPlacement {
    /// The buffers are known to be on another node than the GPU's.
    pub fn remote(&self) -> bool {
        matches!((self.gpu_node, self.pages_node), (Some(g), Some(p)) if g >= 0 && g != p)
            || self.split
    }

    /// "NUMA node 1 (the GPU's), allocated on CPUs 48-95".
    pub fn describe(&self) -> String {
        let mut s = match (self.pages_node, self.gpu_node) {
            (Some(p), Some(g)) if p == g => format!("NUMA node {p} (the GPU's)"),
            (Some(p), Some(g)) if g >= 0 => format!("NUMA node {p}, not the GPU's node {g}"),
            (Some(p), _) => format!("NUMA node {p} (the GPU's node is not reported)"),
            (None, _) => "NUMA node not reported by the kernel".to_string(),
        };
        if self.split {
            s.push_str(", spread over several nodes");
        }
        if let Some(c) = &self.bound_cpus {
            s.push_str(&format!(", allocated on CPUs {c}"));
        }
        if let Some(n) = &self.note {
            s.push_str(&format!(" ({n})"));
        }
        s
    }
}

/// CPU numbers of a kernel CPU list ("0-3,8,10-11"); None when it does not parse or is too
/// large to be a CPU list (more than 65536 CPUs).
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    const MAX_CPU: usize = 1 << 16;
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let a: usize = part.trim().parse().ok()?;
                (a, a)
            }
        };
        // Bounded in total, not only per range: a suite may repeat "0-65535" a million times.
        if a > b || b >= MAX_CPU || out.len() + (b - a) >= MAX_CPU {
            return None;
        }
        out.extend(a..=b);
    }
    (!out.is_empty()).then_some(out)
}

/// A CPU list as the kernel writes it, from CPU numbers in any order: "0-3,8,10-11". The same
/// set always gives the same text, so two lists can be compared as sets by their text.
pub fn cpulist_text(cpus: &[usize]) -> String {
    let mut cpus = cpus.to_vec();
    cpus.sort_unstable();
    cpus.dedup();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for c in cpus {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == c => *end = c,
            _ => ranges.push((c, c)),
        }
    }
    ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The canonical text of a CPU list ("0-1,2-3" and "3,0-2" both give "0-3"); None when it does
/// not parse.
pub fn canonical_cpulist(text: &str) -> Option<String> {
    parse_cpulist(text).map(|c| cpulist_text(&c))
}

/// While alive, the calling thread runs on `cpus` and new pages prefer `node`; both are
/// restored on drop.
pub struct LocalTo {
    old_cpus: Option<libc::cpu_set_t>,
    policy_set: bool,
    pub bound_cpus: Option<String>,
    pub notes: Vec<String>,
}

impl LocalTo {
    /// Bind to the GPU at `bus_id` (sysfs under `root`). Whatever cannot be done is noted, not
    /// an error: the copy still runs, and its placement is recorded.
    pub fn gpu(root: &Path, bus_id: &str) -> (LocalTo, Option<i32>) {
        let node = super::pci::numa_node(root, bus_id).filter(|n| *n >= 0);
        let cpus = super::pci::local_cpulist(root, bus_id);
        (LocalTo::bind(cpus.as_deref(), node), node)
    }

    pub fn bind(cpus: Option<&str>, node: Option<i32>) -> LocalTo {
        let mut me = LocalTo {
            old_cpus: None,
            policy_set: false,
            bound_cpus: None,
            notes: Vec::new(),
        };
        match cpus.map(|c| (c, parse_cpulist(c))) {
            Some((c, Some(list))) => match set_affinity(&list) {
                Ok(old) => {
                    me.old_cpus = Some(old);
                    me.bound_cpus = Some(c.trim().to_string());
                }
                Err(e) => me
                    .notes
                    .push(format!("not bound to CPUs {}: {e}", c.trim())),
            },
            Some((c, None)) => me
                .notes
                .push(format!("not bound: unreadable CPU list {c:?}")),
            None => me
                .notes
                .push("not bound: the GPU's CPUs are not reported".into()),
        }
        if let Some(n) = node {
            match prefer_node(n) {
                Ok(()) => me.policy_set = true,
                Err(e) => me.notes.push(format!("memory policy not set: {e}")),
            }
        }
        me
    }
}

impl Drop for LocalTo {
    fn drop(&mut self) {
        if let Some(old) = self.old_cpus.take() {
            // SAFETY: a valid cpu_set_t for this thread (pid 0).
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &old) };
        }
        if self.policy_set {
            // SAFETY: MPOL_DEFAULT takes no node mask.
            unsafe {
                libc::syscall(
                    libc::SYS_set_mempolicy,
                    MPOL_DEFAULT,
                    std::ptr::null::<libc::c_ulong>(),
                    0 as libc::c_ulong,
                )
            };
        }
    }
}

const MPOL_DEFAULT: libc::c_int = 0;
const MPOL_PREFERRED: libc::c_int = 1;
const MPOL_F_NODE: libc::c_ulong = 1;
const MPOL_F_ADDR: libc::c_ulong = 2;
/// Bits of the node mask passed to set_mempolicy (1024 nodes, more than any machine has).
const MASK_BITS: usize = 1024;

fn set_affinity(cpus: &[usize]) -> Result<libc::cpu_set_t, String> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut old: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: valid pointer and size, for this thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut old) } != 0 {
        return Err(std::io::Error::last_os_error().to_string().to_lowercase());
    }
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut any = false;
    for &c in cpus.iter().filter(|&&c| c < 8 * size) {
        // SAFETY: c is within the set's bits, and only allowed CPUs are kept.
        if unsafe { libc::CPU_ISSET(c, &old) } {
            unsafe { libc::CPU_SET(c, &mut set) };
            any = true;
        }
    }
    if !any {
        return Err("none of those CPUs is allowed to this process".into());
    }
    // SAFETY: valid set and size.
    if unsafe { libc::sched_setaffinity(0, size, &set) } != 0 {
        return Err(std::io::Error::last_os_error().to_string().to_lowercase());
    }
    Ok(old)
}

fn prefer_node(node: i32) -> Result<(), String> {
    let n = usize::try_from(node).map_err(|_| format!("node {node}"))?;
    if n >= MASK_BITS {
        return Err(format!("node {node} is beyond {MASK_BITS} nodes"));
    }
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let mut mask = vec![0 as libc::c_ulong; MASK_BITS / bits];
    mask[n / bits] |= 1 << (n % bits);
    // SAFETY: the mask holds MASK_BITS bits; maxnode counts them (plus one, as the kernel
    // drops the last bit).
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_PREFERRED,
            mask.as_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().to_string().to_lowercase());
    }
    Ok(())
}

/// The NUMA node of the page at address `addr`, which must be mapped (touched) already; the
/// kernel checks the address (EFAULT), nothing here dereferences it.
pub fn page_node(addr: usize) -> Result<i32, String> {
    let mut node: libc::c_int = -1;
    // SAFETY: with MPOL_F_NODE | MPOL_F_ADDR the kernel writes the node of the page at `addr`
    // into `node` and reads no mask.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr as *const libc::c_void,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().to_string().to_lowercase());
    }
    Ok(node)
}

/// Where the first and last pages of a touched buffer at address `addr` are, in a placement
/// record.
pub fn placement(
    addr: usize,
    bytes: usize,
    gpu_node: Option<i32>,
    bind: &LocalTo,
) -> HostPlacement {
    let first = page_node(addr);
    let last = page_node(addr.saturating_add(bytes.saturating_sub(1)));
    let mut notes = bind.notes.clone();
    let (pages_node, split) = match (first, last) {
        (Ok(a), Ok(b)) => (Some(a), a != b),
        (Err(e), _) | (_, Err(e)) => {
            notes.push(format!("page node not reported: {e}"));
            (None, false)
        }
    };
    HostPlacement {
        gpu_node,
        bound_cpus: bind.bound_cpus.clone(),
        pages_node,
        split,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_compare_as_sets() {
        assert_eq!(canonical_cpulist("3,0-2").as_deref(), Some("0-3"));
        assert_eq!(canonical_cpulist("0-1,2-3,3").as_deref(), Some("0-3"));
        assert_eq!(
            canonical_cpulist("112-167,0-55").as_deref(),
            Some("0-55,112-167")
        );
        assert_eq!(canonical_cpulist("0-x"), None);
        // Each range in bounds, the whole list not: refused before it is expanded.
        let huge = vec!["0-65535"; 100_000].join(",");
        assert_eq!(parse_cpulist(&huge), None);
        assert_eq!(parse_cpulist("0-65535").map(|c| c.len()), Some(65536));
        assert_eq!(cpulist_text(&[5, 7, 6, 9]), "5-7,9");
    }

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        for bad in ["", "a-b", "3-1", "0-99999999", "1,,x"] {
            assert_eq!(parse_cpulist(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn placement_says_when_the_buffers_are_on_the_other_socket() {
        let p = |gpu, pages, split| HostPlacement {
            gpu_node: gpu,
            pages_node: pages,
            split,
            ..Default::default()
        };
        assert!(!p(Some(1), Some(1), false).remote());
        assert!(p(Some(1), Some(0), false).remote());
        assert!(p(Some(1), Some(1), true).remote());
        // Unknown is not called remote (nor local): the record says what is known.
        assert!(!p(None, Some(0), false).remote());
        assert!(!p(Some(-1), Some(0), false).remote());
        assert!(!p(Some(1), None, false).remote());
        assert_eq!(
            p(Some(1), Some(0), false).describe(),
            "NUMA node 0, not the GPU's node 1"
        );
        assert_eq!(
            p(Some(0), Some(0), false).describe(),
            "NUMA node 0 (the GPU's)"
        );
    }

    #[test]
    fn binding_moves_the_thread_and_restores_it() {
        // On its own thread: the test harness's threads keep their affinity.
        std::thread::spawn(|| {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut before) }, 0);
            let first = (0..8 * size)
                .find(|&c| unsafe { libc::CPU_ISSET(c, &before) })
                .unwrap();
            {
                let b = LocalTo::bind(Some(&first.to_string()), Some(0));
                assert_eq!(b.bound_cpus.as_deref(), Some(first.to_string().as_str()));
                let mut now: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut now) }, 0);
                assert_eq!(unsafe { libc::CPU_COUNT(&now) }, 1);
                // A page touched now lands on node 0, the only node of a one-node machine
                // (and the preferred one of any other).
                let mut v = vec![1u8; 1 << 16];
                v[0] = 2;
                if let Ok(n) = page_node(v.as_ptr() as usize) {
                    let pl = placement(v.as_ptr() as usize, v.len(), Some(0), &b);
                    assert_eq!(pl.pages_node, Some(n));
                    assert_eq!(pl.bound_cpus.as_deref(), Some(first.to_string().as_str()));
                }
            }
            let mut after: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut after) }, 0);
            assert_eq!(unsafe { libc::CPU_COUNT(&after) }, unsafe {
                libc::CPU_COUNT(&before)
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    fn what_cannot_be_bound_is_noted_not_fatal() {
        let b = LocalTo::bind(None, None);
        assert!(b.bound_cpus.is_none());
        assert_eq!(b.notes, vec!["not bound: the GPU's CPUs are not reported"]);
        let b = LocalTo::bind(Some("999999"), None);
        assert!(b.notes[0].starts_with("not bound"), "{:?}", b.notes);
        let b = LocalTo::bind(Some("garbage"), None);
        assert!(b.notes[0].contains("unreadable CPU list"), "{:?}", b.notes);
    }
}
