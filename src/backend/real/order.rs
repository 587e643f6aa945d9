//! GPU order: CUDA ordinals, matched with NVML devices by UUID or bus id, never by index.
//!
//! NVML enumerates every GPU in its own order and ignores CUDA_VISIBLE_DEVICES; CUDA numbers
//! the GPUs a process may use. The inventory lists GPUs in CUDA ordinal order, so that "GPU 3"
//! in a report is the GPU that `cudaSetDevice(3)` picks.

use crate::inventory::normalize_bus_id;

/// One CUDA device as the driver API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaDevice {
    pub ordinal: usize,
    /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML writes it.
    pub uuid: Option<String>,
    /// Normalised bus id.
    pub bus_id: Option<String>,
    /// CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (NVLS needs it); None: not read.
    pub multicast: Option<bool>,
    /// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (GPUDirect RDMA through dma-buf); None: not read.
    pub dmabuf: Option<bool>,
}

/// What CUDA says about the GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaView {
    Devices(Vec<CudaDevice>),
    /// libcuda is absent or did not start: the reason.
    Unavailable(String),
}

/// One NVML device: its UUID and normalised bus id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlId {
    pub uuid: String,
    pub bus_id: String,
}

/// NVML indices in CUDA ordinal order, and what the reader should know about it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Order {
    pub nvml_indices: Vec<usize>,
    /// CUDA's multicast support of each, in the same order (all None without CUDA).
    pub multicast: Vec<Option<bool>>,
    /// CUDA's dma-buf support of each, in the same order (all None without CUDA).
    pub dmabuf: Vec<Option<bool>>,
    pub notes: Vec<String>,
}

/// A CUDA UUID in NVML's text form.
pub fn uuid_text(b: &[u8; 16]) -> String {
    let h = hex::encode(b);
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn find(nvml: &[NvmlId], used: &[bool], c: &CudaDevice) -> Option<usize> {
    let free = |j: &usize| !used[*j];
    let by_uuid = c.uuid.as_ref().and_then(|u| {
        (0..nvml.len())
            .filter(free)
            .find(|&j| nvml[j].uuid.eq_ignore_ascii_case(u))
    });
    by_uuid.or_else(|| {
        let bus = normalize_bus_id(c.bus_id.as_ref()?);
        (0..nvml.len())
            .filter(free)
            .find(|&j| normalize_bus_id(&nvml[j].bus_id) == bus)
    })
}

/// Put NVML devices in CUDA order, leaving out those CUDA does not see. Without CUDA, order by
/// bus id and say so. `visible` is CUDA_VISIBLE_DEVICES, for the notes.
pub fn order(nvml: &[NvmlId], cuda: &CudaView, visible: Option<&str>) -> Order {
    let mut out = Order::default();
    // A GPU NVML could not hand out has no ids (it is reported as lost, not as hidden).
    let unknown = |id: &NvmlId| id.uuid.is_empty() && id.bus_id.is_empty();
    let by_bus_id = |mut out: Order, why: &str| {
        let mut idx: Vec<usize> = (0..nvml.len()).filter(|&j| !unknown(&nvml[j])).collect();
        idx.sort_by_key(|&j| normalize_bus_id(&nvml[j].bus_id));
        out.multicast = vec![None; idx.len()];
        out.dmabuf = vec![None; idx.len()];
        out.nvml_indices = idx;
        out.notes.push(format!(
            "gpu order: by PCI bus id, not CUDA ordinal ({why})"
        ));
        out
    };
    let devices = match cuda {
        CudaView::Devices(d) => d,
        CudaView::Unavailable(why) => return by_bus_id(out, why),
    };
    let listed = nvml.iter().filter(|id| !unknown(id)).count();
    if devices.is_empty() && listed > 0 {
        // cuInit said CUDA_ERROR_NO_DEVICE (or counts none): the NVML inventory still tells
        // what the node is, and every measurement then fails saying CUDA sees no GPU.
        let why = format!(
            "CUDA sees none of the {listed} GPUs NVML lists{}",
            visible
                .map(|v| format!(", CUDA_VISIBLE_DEVICES={v}"))
                .unwrap_or_default()
        );
        return by_bus_id(out, &why);
    }
    let mut used = vec![false; nvml.len()];
    for c in devices {
        match find(nvml, &used, c) {
            Some(j) => {
                used[j] = true;
                out.nvml_indices.push(j);
                out.multicast.push(c.multicast);
                out.dmabuf.push(c.dmabuf);
            }
            None => out.notes.push(format!(
                "cuda device {} ({}) matches no NVML device: left out",
                c.ordinal,
                c.uuid.as_deref().or(c.bus_id.as_deref()).unwrap_or("no id")
            )),
        }
    }
    for (id, _) in nvml
        .iter()
        .zip(&used)
        .filter(|(id, u)| !**u && !unknown(id))
    {
        out.notes.push(match visible {
            Some(v) => format!(
                "gpu at {} is hidden from CUDA (CUDA_VISIBLE_DEVICES={v}): left out",
                id.bus_id
            ),
            None => format!("gpu at {} is not visible to CUDA: left out", id.bus_id),
        });
    }
    out
}

/// Ask the CUDA driver for its devices. Guarded: a missing libcuda makes cudarc panic, so its
/// presence is checked first; a missing symbol panics too, so the panic is caught as a last
/// resort and reported as CUDA being unavailable.
pub fn cuda_view() -> CudaView {
    cuda_view_within(crate::backend::cuda::SETUP_LIMIT, read_cuda_view)
}

/// `read` on a thread of its own, for at most `limit`: cuInit can hang on a GPU in a bad state,
/// and `inventory` must still end. A thread left waiting is recorded, so that the process ends
/// without the exit handlers that could wait for it (see `main`).
fn cuda_view_within(limit: std::time::Duration, read: fn() -> CudaView) -> CudaView {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, rx) = channel();
    let spawned = std::thread::Builder::new()
        .name("nodecert-cuda-list".into())
        .spawn(move || {
            let view = std::panic::catch_unwind(read).unwrap_or_else(|_| {
                CudaView::Unavailable(
                    "the CUDA driver library lacks a function cudarc needs".into(),
                )
            });
            let _ = tx.send(view);
        });
    if let Err(e) = spawned {
        return CudaView::Unavailable(format!("no thread to ask CUDA on ({e})"));
    }
    match rx.recv_timeout(limit) {
        Ok(view) => view,
        Err(RecvTimeoutError::Timeout) => {
            crate::backend::cuda::abandon();
            CudaView::Unavailable(format!(
                "cuInit and the CUDA device list did not answer within {} s",
                limit.as_secs_f64()
            ))
        }
        Err(RecvTimeoutError::Disconnected) => {
            CudaView::Unavailable("the thread asking CUDA ended without an answer".into())
        }
    }
}

fn read_cuda_view() -> CudaView {
    use cudarc::driver::{result, sys};
    // Safety: only tries to dlopen libcuda and drops it.
    if !unsafe { sys::is_culib_present() } {
        return CudaView::Unavailable("libcuda not found".into());
    }
    match result::init() {
        Ok(()) => {}
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => {
            return CudaView::Devices(vec![]);
        }
        Err(e) => return CudaView::Unavailable(format!("cuInit failed: {}", cuda_error(&e))),
    }
    let n = match result::device::get_count() {
        Ok(n) => n.max(0) as usize,
        Err(e) => {
            return CudaView::Unavailable(format!("cuDeviceGetCount failed: {}", cuda_error(&e)))
        }
    };
    CudaView::Devices((0..n).map(cuda_device).collect())
}

fn cuda_device(ordinal: usize) -> CudaDevice {
    use cudarc::driver::{result, sys};
    let dev = result::device::get(ordinal as i32).ok();
    let uuid = dev
        .and_then(|d| result::device::get_uuid(d).ok())
        .map(|u| uuid_text(&u.bytes.map(|b| b as u8)));
    let attr = |a| dev.and_then(|d| unsafe { result::device::get_attribute(d, a) }.ok());
    use sys::CUdevice_attribute::*;
    let bus_id = match (
        attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    ) {
        (Some(d), Some(b), Some(s)) => Some(format!("{d:04x}:{b:02x}:{s:02x}.0")),
        _ => None,
    };
    // A driver older than CUDA 12.1 does not know the attribute: not read, never "no".
    let multicast = attr(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED).map(|v| v != 0);
    let dmabuf = attr(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).map(|v| v != 0);
    CudaDevice {
        ordinal,
        uuid,
        bus_id,
        multicast,
        dmabuf,
    }
}

fn cuda_error(e: &cudarc::driver::DriverError) -> String {
    e.error_string()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_else(|_| format!("{:?}", e.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvml_ids() -> Vec<NvmlId> {
        [
            ("GPU-aaaa", "00000000:3B:00.0"),
            ("GPU-bbbb", "00000000:1A:00.0"),
            ("GPU-cccc", "00000000:5D:00.0"),
        ]
        .iter()
        .map(|(u, b)| NvmlId {
            uuid: u.to_string(),
            bus_id: normalize_bus_id(b),
        })
        .collect()
    }

    fn cuda(list: &[(Option<&str>, Option<&str>)]) -> CudaView {
        CudaView::Devices(
            list.iter()
                .enumerate()
                .map(|(i, (u, b))| CudaDevice {
                    ordinal: i,
                    uuid: u.map(String::from),
                    bus_id: b.map(String::from),
                    multicast: Some(i != 1),
                    dmabuf: None,
                })
                .collect(),
        )
    }

    #[test]
    fn cuda_order_wins_over_nvml_index() {
        let c = cuda(&[
            (Some("GPU-bbbb"), None),
            (Some("GPU-aaaa"), None),
            (Some("GPU-cccc"), None),
        ]);
        let o = order(&nvml_ids(), &c, None);
        assert_eq!(o.nvml_indices, vec![1, 0, 2]);
        // Multicast support travels with its CUDA device (the test's ordinal 1 says no).
        assert_eq!(o.multicast, vec![Some(true), Some(false), Some(true)]);
        assert!(o.notes.is_empty());
    }

    #[test]
    fn a_lost_gpu_is_left_out_without_a_hidden_note() {
        // NVML index 1 fell off the bus: no ids. CUDA still lists the two others.
        let mut ids = nvml_ids();
        ids[1] = NvmlId {
            uuid: String::new(),
            bus_id: String::new(),
        };
        let c = cuda(&[(Some("GPU-aaaa"), None), (Some("GPU-cccc"), None)]);
        let o = order(&ids, &c, None);
        assert_eq!(o.nvml_indices, vec![0, 2]);
        assert!(o.notes.is_empty(), "{:?}", o.notes);
    }

    #[test]
    fn bus_id_joins_when_uuids_differ() {
        // MIG devices carry MIG-... UUIDs; the bus id still names the GPU.
        let c = cuda(&[(Some("MIG-1234"), Some("0000:5D:00.0"))]);
        let o = order(&nvml_ids(), &c, Some("MIG-1234"));
        assert_eq!(o.nvml_indices, vec![2]);
        assert_eq!(o.notes.len(), 2, "{:?}", o.notes);
        assert!(
            o.notes[0].contains("0000:3b:00.0")
                && o.notes[0].contains("CUDA_VISIBLE_DEVICES=MIG-1234")
        );
    }

    #[test]
    fn visible_devices_filter_the_list() {
        let c = cuda(&[(Some("GPU-cccc"), None)]);
        let o = order(&nvml_ids(), &c, Some("2"));
        assert_eq!(o.nvml_indices, vec![2]);
        assert_eq!(o.notes.len(), 2);
    }

    #[test]
    fn unmatched_cuda_device_is_named() {
        let c = cuda(&[
            (Some("GPU-zzzz"), Some("0000:99:00.0")),
            (Some("GPU-aaaa"), None),
        ]);
        let o = order(&nvml_ids(), &c, None);
        assert_eq!(o.nvml_indices, vec![0]);
        assert!(o.notes[0].starts_with("cuda device 0 (GPU-zzzz) matches no NVML device"));
    }

    #[test]
    fn without_cuda_order_by_bus_id() {
        let o = order(
            &nvml_ids(),
            &CudaView::Unavailable("libcuda not found".into()),
            None,
        );
        assert_eq!(o.nvml_indices, vec![1, 0, 2]);
        assert_eq!(
            o.notes,
            vec!["gpu order: by PCI bus id, not CUDA ordinal (libcuda not found)"]
        );
    }

    #[test]
    fn cuda_seeing_no_gpu_still_gives_the_nvml_inventory_by_bus_id() {
        // cuInit answered CUDA_ERROR_NO_DEVICE: an empty device list, not an abort.
        let o = order(&nvml_ids(), &CudaView::Devices(vec![]), Some(""));
        assert_eq!(o.nvml_indices, vec![1, 0, 2]);
        assert_eq!(
            o.notes,
            vec![
                "gpu order: by PCI bus id, not CUDA ordinal (CUDA sees none of the 3 GPUs \
                 NVML lists, CUDA_VISIBLE_DEVICES=)"
            ]
        );
        // A GPU that fell off the bus stays out of the list (the health check reports it).
        let mut ids = nvml_ids();
        ids[0] = NvmlId {
            uuid: String::new(),
            bus_id: String::new(),
        };
        let o = order(&ids, &CudaView::Devices(vec![]), None);
        assert_eq!(o.nvml_indices, vec![1, 2]);
        assert!(o.notes[0].contains("none of the 2 GPUs"), "{:?}", o.notes);
    }

    #[test]
    fn uuids_print_like_nvml() {
        let b: [u8; 16] = [
            0xb5, 0x82, 0x86, 0x72, 0x93, 0x3a, 0x06, 0x38, 0xca, 0xdd, 0xd7, 0x5f, 0xdb, 0xc9,
            0xc2, 0xeb,
        ];
        assert_eq!(uuid_text(&b), "GPU-b5828672-933a-0638-cadd-d75fdbc9c2eb");
    }

    #[test]
    fn no_libcuda_here_is_not_a_panic() {
        // On a machine without the driver this must answer, not panic.
        let _ = cuda_view();
    }

    #[test]
    fn a_cuda_that_does_not_answer_is_left_behind_not_waited_for() {
        use std::time::{Duration, Instant};
        fn hangs() -> CudaView {
            std::thread::sleep(Duration::from_secs(30));
            CudaView::Devices(vec![])
        }
        let t0 = Instant::now();
        let v = cuda_view_within(Duration::from_millis(100), hangs);
        assert!(t0.elapsed() < Duration::from_secs(10));
        match v {
            CudaView::Unavailable(why) => {
                assert!(why.contains("did not answer within 0.1 s"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert!(crate::backend::cuda::thread_abandoned());
        fn panics() -> CudaView {
            panic!("cudarc: symbol cuDeviceGetUuid_v2 not found")
        }
        match cuda_view_within(Duration::from_secs(10), panics) {
            CudaView::Unavailable(why) => assert!(why.contains("lacks a function"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
