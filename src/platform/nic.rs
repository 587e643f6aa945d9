//! The node's RDMA NICs from sysfs, under a root that tests point at a fixture tree:
//! `sys/class/infiniband/*` (ports, state, rate, link layer, firmware, GUIDs, error counters),
//! `sys/class/net/*` (the ports' interfaces), each NIC's and GPU's place in the PCI tree (for
//! their relation, as `nvidia-smi topo -m` prints it, and the ACS state of the bridges between
//! them) and GPUDirect RDMA's kernel side (`nvidia_peermem`, the peer-memory interface).
//!
//! Every file is read bounded, as a regular file; every symbolic link is resolved inside the
//! root (a link out of it is not followed); a reading that is absent is `None` with a note.
//! The reading runs on a thread of its own under a deadline per file ([`READ_LIMIT`]): a NIC
//! whose firmware hangs blocks a read of its counters in the kernel for good, and the run must
//! say so ([`Fabric::no_answer`]) rather than hang with it.

use super::pci::{parse_acs, Acs};
use crate::network::{
    parse_rate, relation, state_name, Fabric, Gdr, NetDev, Nic, NicPort, NoAnswer, PciPlace,
    CARRIER_CHANGES, COUNTERS,
};
use crate::suite::PciePath;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most RDMA devices, ports per device and interfaces per device read: far above any node.
pub(crate) const MAX_NICS: usize = 256;
const MAX_PORTS: u32 = 64;
/// The most bytes read of one sysfs attribute (a config space is 4 KiB).
const MAX_ATTR: u64 = 64 * 1024;

/// The longest one file (or folder) of the NIC reader may take to answer. A healthy read takes
/// microseconds (a port counter, a firmware query, milliseconds); a NIC whose firmware hangs
/// blocks it in the kernel for good.
pub const READ_LIMIT: Duration = Duration::from_secs(5);

/// Reads one file, already resolved inside the root: its bytes, bounded, or None when it is
/// absent or not a regular file. Tests put a read that blocks in its place.
pub type ReadFile = Arc<dyn Fn(&Path) -> Option<Vec<u8>> + Send + Sync>;

/// The file a reader thread started last, and when.
struct Started(Mutex<(Instant, PathBuf)>);

impl Started {
    fn mark(&self, p: &Path) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *g = (Instant::now(), p.to_path_buf());
    }
    fn get(&self) -> (Instant, PathBuf) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What every read of one reading goes through: the (canonical) root, the file reader, and
/// where the thread is.
struct Sysfs<'a> {
    root: &'a Path,
    read_file: &'a (dyn Fn(&Path) -> Option<Vec<u8>> + Send + Sync),
    started: &'a Started,
}

/// A GPU as the reader needs it: its index, PCI bus id and NUMA node.
#[derive(Debug, Clone)]
pub struct GpuAt {
    pub index: usize,
    pub pci_bus_id: String,
    pub numa_node: Option<i32>,
}

/// A regular file's bytes, bounded (the reader's [`ReadFile`] on a real node).
fn read_regular(p: &Path) -> Option<Vec<u8>> {
    let f = crate::fsio::read::open(p, false).ok()?;
    crate::fsio::read::read_limited(f, MAX_ATTR, "a sysfs attribute").ok()
}

/// The bytes of a sysfs attribute, bounded; None when absent, not a regular file, or reached
/// only through a link out of the root (sysfs's own links, inside it, are followed).
fn read_bytes(s: &Sysfs, p: &Path) -> Option<Vec<u8>> {
    s.started.mark(p);
    let real = resolve(s.root, p)?;
    (s.read_file)(&real)
}

/// A sysfs attribute as text, trimmed; None when absent, empty or not text.
fn read_attr(s: &Sysfs, p: &Path) -> Option<String> {
    let b = read_bytes(s, p)?;
    let t = String::from_utf8(b).ok()?;
    let t = t.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!t.is_empty() && !t.chars().any(|c| c.is_control())).then(|| t.to_string())
}

fn read_num<T: std::str::FromStr>(s: &Sysfs, p: &Path) -> Option<T> {
    read_attr(s, p)?.parse().ok()
}

/// The entries of a folder, sorted, names only (None when it cannot be listed, or is reached
/// only through a link out of the root).
fn list(s: &Sysfs, dir: &Path, limit: usize) -> Option<Vec<String>> {
    s.started.mark(dir);
    let rd = std::fs::read_dir(resolve(s.root, dir)?).ok()?;
    let mut v: Vec<String> = rd
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .take(limit + 1)
        .collect();
    v.sort_by(|a, b| crate::fleet::natural_cmp(a, b));
    Some(v)
}

/// `p` with every link resolved, only when it stays inside `root` (already canonical).
fn resolve(root: &Path, p: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(p).ok()?;
    real.starts_with(root).then_some(real)
}

/// Where the PCI function whose sysfs folder is `dev` sits (`dev` resolved inside the root).
fn place(s: &Sysfs, dev: &Path) -> Option<PciPlace> {
    let rel = dev.strip_prefix(s.root).ok()?;
    let mut parts = rel.iter().map(|c| c.to_str().unwrap_or(""));
    if parts.next()? != "sys" || parts.next()? != "devices" {
        return None;
    }
    let host_bridge = parts.next()?.to_string();
    if !host_bridge.starts_with("pci") {
        return None;
    }
    // Functions down to the device itself; a domain may have more than 4 hex digits (a VMD
    // controller's "10000:e1:00.0").
    let chain: Vec<String> = parts
        .take_while(|c| is_function(c))
        .map(String::from)
        .collect();
    if chain.is_empty() {
        return None;
    }
    let numa_node = read_num::<i32>(s, &dev.join("numa_node")).filter(|n| *n >= 0);
    Some(PciPlace {
        host_bridge,
        chain,
        numa_node,
    })
}

/// "0000:3b:00.0" or "10000:e1:00.0": domain (4 or more hex digits), bus, device, function.
fn is_function(s: &str) -> bool {
    match s.split_once(':') {
        Some((domain, rest)) if domain.len() >= 4 && domain.len() <= 8 => {
            domain.bytes().all(|b| b.is_ascii_hexdigit())
                && super::pci::is_bdf(&format!("0000:{rest}"))
        }
        _ => false,
    }
}

/// The sysfs folder of the PCI function `bus_id`, resolved inside `root`.
fn pci_dir(root: &Path, bus_id: &str) -> Option<PathBuf> {
    resolve(root, &root.join("sys/bus/pci/devices").join(bus_id))
}

/// The folder of the function `chain[i]`: the prefix of `dev`'s path that ends in it.
fn ancestor_dir(dev: &Path, bus_id: &str) -> Option<PathBuf> {
    dev.ancestors()
        .find(|p| p.file_name().and_then(|n| n.to_str()) == Some(bus_id))
        .map(Path::to_path_buf)
}

/// Bridges on the path between two places (each side's bridges below the shared part, and the
/// deepest shared one), with the folder of each.
fn bridges_between(a: (&PciPlace, &Path), b: (&PciPlace, &Path)) -> Vec<(String, PathBuf)> {
    let (pa, da) = a;
    let (pb, db) = b;
    let common = pa
        .chain
        .iter()
        .zip(&pb.chain)
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = Vec::new();
    if common > 0 && common < pa.chain.len() {
        let id = &pa.chain[common - 1];
        if let Some(d) = ancestor_dir(da, id) {
            out.push((id.clone(), d));
        }
    }
    for (p, d) in [(pa, da), (pb, db)] {
        let end = p.chain.len().saturating_sub(1);
        for id in p.chain.iter().take(end).skip(common) {
            if let Some(dir) = ancestor_dir(d, id) {
                out.push((id.clone(), dir));
            }
        }
    }
    out
}

/// Read the NICs under `root` and relate them to `gpus`, every file under [`READ_LIMIT`]: one
/// that does not answer in time leaves the NICs unread and [`Fabric::no_answer`] naming it.
pub fn read(root: &Path, gpus: &[GpuAt]) -> Fabric {
    read_within(root, gpus, READ_LIMIT, Arc::new(read_regular))
}

/// [`read`] with its deadline per file and its file reader given.
///
/// The reading runs on a thread of its own while this one watches the file it started last. A
/// read blocked in the kernel (a NIC with hung firmware) cannot be interrupted, and a thread
/// cannot be killed: past the deadline that thread is left behind, blocked, and whatever it
/// reads later goes nowhere. Each reading that hangs leaves one such thread.
pub fn read_within(root: &Path, gpus: &[GpuAt], limit: Duration, read_file: ReadFile) -> Fabric {
    let started = Arc::new(Started(Mutex::new((Instant::now(), root.to_path_buf()))));
    let (tx, rx) = channel();
    let worker = {
        let (root, gpus, started) = (root.to_path_buf(), gpus.to_vec(), Arc::clone(&started));
        let read_file = Arc::clone(&read_file);
        std::thread::Builder::new()
            .name("nodecert-nic-read".into())
            .spawn(move || {
                let _ = tx.send(read_all(&root, &gpus, &*read_file, &started));
            })
    };
    let Ok(worker) = worker else {
        // No thread to spare (the process is at its limit): read here, without a deadline,
        // as the watchdog does without its thread.
        return read_all(root, gpus, &*read_file, &started);
    };
    loop {
        let (at, file) = started.get();
        let left = limit.saturating_sub(at.elapsed());
        if left.is_zero() {
            return unanswered(root, &file, limit);
        }
        match rx.recv_timeout(left) {
            Ok(f) => return f,
            // Not yet: the file in progress may have changed since; look again.
            Err(RecvTimeoutError::Timeout) => {}
            // The reader panicked (a bug): the panic goes on here, as if read on this thread.
            Err(RecvTimeoutError::Disconnected) => match worker.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the NIC reader ended without sending what it read"),
            },
        }
    }
}

/// The NICs when the read of `file` did not answer within `limit`: none read, the read named.
fn unanswered(root: &Path, file: &Path, limit: Duration) -> Fabric {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let rel = file.strip_prefix(&root).unwrap_or(file);
    let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
    let (nic, port) = match parts.as_slice() {
        ["sys", "class", "infiniband", nic, "ports", port, ..] => {
            (Some(nic.to_string()), port.parse().ok())
        }
        ["sys", "class", "infiniband", nic, ..] => (Some(nic.to_string()), None),
        _ => (None, None),
    };
    let no = NoAnswer {
        file: Path::new("/").join(rel).display().to_string(),
        nic,
        port,
        waited_s: limit.as_secs_f64(),
    };
    Fabric {
        unavailable: vec![format!("nics: {}", no.describe())],
        no_answer: Some(no),
        ..Default::default()
    }
}

/// Read the NICs under `root` on this thread, marking each file in `started` as it begins.
fn read_all(
    root: &Path,
    gpus: &[GpuAt],
    read_file: &(dyn Fn(&Path) -> Option<Vec<u8>> + Send + Sync),
    started: &Started,
) -> Fabric {
    let mut f = Fabric::default();
    let Ok(root) = std::fs::canonicalize(root) else {
        f.unavailable
            .push(format!("nics: {} cannot be read", root.display()));
        return f;
    };
    let s = Sysfs {
        root: &root,
        read_file,
        started,
    };
    f.gdr = gdr(&s);
    let class = root.join("sys/class/infiniband");
    // No RDMA stack loaded, or a VM with none passed through: no NIC, said as such.
    let names = list(&s, &class, MAX_NICS).unwrap_or_default();
    if names.len() > MAX_NICS {
        f.unavailable.push(format!(
            "nics: more than {MAX_NICS} RDMA devices; only the first {MAX_NICS} are read"
        ));
    }
    let gpu_places: Vec<Option<(PciPlace, PathBuf)>> = gpus
        .iter()
        .map(|g| {
            let dir = pci_dir(&root, &g.pci_bus_id)?;
            let mut p = place(&s, &dir)?;
            // The inventory's NUMA node (NVML's) where sysfs gives none.
            p.numa_node = p.numa_node.or(g.numa_node);
            Some((p, dir))
        })
        .collect();
    for (g, p) in gpus.iter().zip(&gpu_places) {
        if p.is_none() {
            f.unavailable.push(format!(
                "gpu{} ({}): not found in the PCI tree under {}: its relation to the NICs is unknown",
                g.index,
                g.pci_bus_id,
                root.display()
            ));
        }
    }
    for name in names.into_iter().take(MAX_NICS) {
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            f.unavailable.push(format!(
                "nics: a device with an unusual name ({name:?}) is skipped"
            ));
            continue;
        }
        let dir = class.join(&name);
        f.nics
            .push(read_nic(&s, &dir, &name, &gpu_places, &mut f.unavailable));
    }
    f
}

fn read_nic(
    s: &Sysfs,
    dir: &Path,
    name: &str,
    gpus: &[Option<(PciPlace, PathBuf)>],
    notes: &mut Vec<String>,
) -> Nic {
    let mut nic = Nic {
        name: name.to_string(),
        fw_ver: read_attr(s, &dir.join("fw_ver")),
        node_guid: read_attr(s, &dir.join("node_guid")),
        sys_image_guid: read_attr(s, &dir.join("sys_image_guid")),
        ..Default::default()
    };
    let dev = resolve(s.root, &dir.join("device"));
    let here = dev.as_ref().and_then(|d| Some((place(s, d)?, d.clone())));
    match &here {
        Some((p, d)) => {
            nic.pci_bus_id = p.chain.last().cloned();
            nic.numa_node = p.numa_node;
            let mut acs = Vec::new();
            let mut unknown = Vec::new();
            for g in gpus {
                let path = g.as_ref().and_then(|(gp, _)| relation(gp, p));
                nic.gpu_paths.push(path);
                // ACS matters where GPUDirect traffic would stay below the root complex.
                if let (Some((gp, gd)), Some(PciePath::Pix | PciePath::Pxb)) = (g, path) {
                    for (id, bdir) in bridges_between((gp, gd), (p, d)) {
                        match read_bytes(s, &bdir.join("config")).map(|b| parse_acs(&b)) {
                            Some(a) if a.redirects() => acs.push(id),
                            Some(Acs::NotReadable) | None => {
                                unknown.push(id.clone());
                                notes.push(format!(
                                    "bridge {id} acs: extended config space not readable (needs root)"
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
            acs.sort();
            acs.dedup();
            nic.acs_redirect = acs;
            unknown.sort();
            unknown.dedup();
            nic.acs_unknown = unknown;
        }
        None => {
            nic.gpu_paths = vec![None; gpus.len()];
            notes.push(format!(
                "{name}: its PCI function is not found under {}: its relation to the GPUs is unknown",
                s.root.display()
            ));
        }
    }
    // The interfaces of the NIC's function, by port (dev_port counts from 0).
    let mut netdevs: Vec<(u32, String)> = Vec::new();
    if let Some(d) = &dev {
        for n in list(s, &d.join("net"), MAX_PORTS as usize).unwrap_or_default() {
            let Some(port) = read_num::<u32>(s, &d.join("net").join(&n).join("dev_port"))
                .unwrap_or(0)
                .checked_add(1)
            else {
                continue;
            };
            netdevs.push((port, n));
        }
    }
    let ports = list(s, &dir.join("ports"), MAX_PORTS as usize).unwrap_or_default();
    if ports.is_empty() {
        notes.push(format!("{name}: no port could be read"));
    }
    for p in ports
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|p| (1..=MAX_PORTS).contains(p))
    {
        let pd = dir.join("ports").join(p.to_string());
        let mut port = NicPort {
            port: p,
            state: read_attr(s, &pd.join("state")).map(|t| state_name(&t)),
            phys_state: read_attr(s, &pd.join("phys_state")).map(|t| state_name(&t)),
            rate_gbps: read_attr(s, &pd.join("rate")).and_then(|r| parse_rate(&r)),
            link_layer: read_attr(s, &pd.join("link_layer")),
            ..Default::default()
        };
        for (what, missing) in [
            ("state", port.state.is_none()),
            ("phys_state", port.phys_state.is_none()),
            ("rate", port.rate_gbps.is_none()),
            ("link_layer", port.link_layer.is_none()),
        ] {
            if missing {
                notes.push(format!("{name} port {p} {what}: not readable"));
            }
        }
        for c in COUNTERS {
            if let Some(v) = read_num::<u64>(s, &pd.join("counters").join(c)) {
                port.counters.insert(c.to_string(), v);
            }
        }
        // One interface for the port: the one whose dev_port says so, else the only one.
        let nd = netdevs
            .iter()
            .find(|(n, _)| *n == p)
            .or_else(|| (netdevs.len() == 1 && ports.len() == 1).then(|| &netdevs[0]));
        if let Some((_, ifname)) = nd {
            let nd_dir = s.root.join("sys/class/net").join(ifname);
            if let Some(v) = read_num::<u64>(s, &nd_dir.join(CARRIER_CHANGES)) {
                port.counters.insert(CARRIER_CHANGES.to_string(), v);
            }
            port.netdev = Some(NetDev {
                name: ifname.clone(),
                operstate: read_attr(s, &nd_dir.join("operstate")),
                // -1 (link down) is not a speed.
                speed_mbps: read_num::<i64>(s, &nd_dir.join("speed"))
                    .and_then(|s| u64::try_from(s).ok()),
                mtu: read_num(s, &nd_dir.join("mtu")),
            });
        }
        nic.ports.push(port);
    }
    nic
}

/// GPUDirect RDMA's kernel side, as NCCL looks for it.
fn gdr(s: &Sysfs) -> Gdr {
    let peermem = read_attr(s, &s.root.join("sys/module/nvidia_peermem/version")).or_else(|| {
        // A module without a version file is still loaded.
        s.root
            .join("sys/module/nvidia_peermem")
            .is_dir()
            .then(|| "loaded".to_string())
    });
    let memory_peers = list(s, &s.root.join("sys/kernel/mm/memory_peers"), 64)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("nv_mem"))
        .find_map(|n| {
            read_attr(
                s,
                &s.root
                    .join("sys/kernel/mm/memory_peers")
                    .join(n)
                    .join("version"),
            )
        });
    Gdr {
        peermem,
        memory_peers,
        dmabuf: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::Receiver;

    fn tree(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(name)
    }

    /// The HGX tree's GPUs (the h100-sxm-8 node's bus ids).
    fn gpus() -> Vec<GpuAt> {
        (0..8)
            .map(|i| GpuAt {
                index: i,
                pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + 0x10 * i),
                numa_node: None,
            })
            .collect()
    }

    /// A reader whose read of a file whose path contains `hang` blocks until `gate`'s sender
    /// is dropped (the end of the test): a hung firmware query.
    fn hanging(hang: &'static str, gate: Receiver<()>) -> ReadFile {
        let gate = Mutex::new(gate);
        Arc::new(move |p: &Path| {
            if p.to_string_lossy().contains(hang) {
                let _ = gate.lock().unwrap().recv();
            }
            read_regular(p)
        })
    }

    #[test]
    fn a_read_that_does_not_answer_is_named_and_nothing_is_taken_for_read() {
        let (_release, gate) = channel();
        let limit = Duration::from_millis(300);
        let t0 = Instant::now();
        let f = read_within(
            &tree("hgx-h100-8nic"),
            &gpus(),
            limit,
            hanging("/mlx5_3/ports/1/counters/symbol_error", gate),
        );
        let waited = t0.elapsed();
        assert!(
            waited >= limit && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        let no = f.no_answer.clone().expect("a read that hung");
        assert_eq!(
            no,
            NoAnswer {
                file: "/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error".into(),
                nic: Some("mlx5_3".into()),
                port: Some(1),
                waited_s: 0.3,
            }
        );
        assert_eq!(
            no.describe(),
            "the NICs did not answer within 0.3 s: reading mlx5_3 port 1 (/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error) never returned (the adapter's firmware or driver is hung: see the kernel log, then reset the adapter or reboot the node)"
        );
        // What was read before it is not passed on as the node's NICs.
        assert!(f.nics.is_empty());
        assert_eq!(f.gdr, Gdr::default());
        assert_eq!(f.unavailable, [format!("nics: {}", no.describe())]);
    }

    #[test]
    fn a_hung_read_outside_a_port_names_the_device_or_the_file() {
        let (_r1, g1) = channel();
        let f = read_within(
            &tree("hgx-h100-8nic"),
            &gpus(),
            Duration::from_millis(200),
            hanging("/mlx5_6/fw_ver", g1),
        );
        let no = f.no_answer.unwrap();
        assert_eq!((no.nic.as_deref(), no.port), (Some("mlx5_6"), None));
        assert!(no
            .describe()
            .contains("reading mlx5_6 (/sys/class/infiniband/mlx5_6/fw_ver) never returned"));
        // A bridge's config space (read for ACS) is no NIC's: the file alone.
        let (_r2, g2) = channel();
        let f = read_within(
            &tree("pcie-box-acs-redirect"),
            &[GpuAt {
                index: 0,
                pci_bus_id: "0000:41:00.0".into(),
                numa_node: None,
            }],
            Duration::from_millis(200),
            hanging("0000:3e:02.0/config", g2),
        );
        let no = f.no_answer.unwrap();
        assert_eq!((no.nic, no.port), (None, None));
        assert_eq!(
            no.file,
            "/sys/devices/pci0000:3c/0000:3c:01.0/0000:3d:00.0/0000:3e:02.0/config"
        );
    }

    #[test]
    fn the_deadline_is_per_read_so_a_slow_node_that_answers_is_read_whole() {
        let limit = Duration::from_millis(500);
        // Every read takes 10 ms: the whole reading takes longer than the deadline, no read
        // does.
        let slow: ReadFile = Arc::new(|p: &Path| {
            std::thread::sleep(Duration::from_millis(10));
            read_regular(p)
        });
        let t0 = Instant::now();
        let f = read_within(&tree("hgx-h100-8nic"), &gpus(), limit, slow);
        assert!(t0.elapsed() > limit, "{:?}", t0.elapsed());
        assert_eq!(f.no_answer, None);
        // The same as read at full speed.
        assert_eq!(f, read(&tree("hgx-h100-8nic"), &gpus()));
        assert_eq!(f.nics.len(), 9);
    }
}
