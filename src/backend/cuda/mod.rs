//! Real measurements through cudarc: copies on the copy engines, peer copies and latency, and
//! NCCL collectives, every one with a deadline and a data check.
//!
//! [`CudaMeasurements`] is what the real backend holds. It does nothing until the first
//! measurement; then it checks that libcuda can be loaded (cudarc panics otherwise), starts a
//! worker thread that opens the GPUs (cuInit, one primary context and two streams per GPU) and
//! runs each measurement there, waiting for it with a deadline ([`worker`]). A measurement that
//! misses its deadline is reported as [`HwError::Timeout`] and every later one fails at once:
//! a hung CUDA context cannot be recovered in-process.
//!
//! Method, in short (details in [`copies`], [`nccl`], [`verify`]):
//! - copies: buffers filled with a pattern, the destination cleared; each sample is a batch of
//!   [`copies_per_sample`] copies timed with CUDA events while a gate holds the stream until the
//!   batch is queued; warm-up samples discarded; the whole destination checked afterwards.
//!   Device-local copies batch [`device_copies_per_sample`] copies (4 GiB per sample).
//!   Host memory is pinned and portable. GB/s are 10^9 bytes/s; device copies count bytes read
//!   plus written; "both at once" figures are the sum of both directions.
//! - peer copies: peer access enabled when the driver allows it (cuDeviceCanAccessPeer,
//!   cuCtxEnablePeerAccess, cuMemPoolSetAccess); otherwise the staged copy is measured and
//!   `peer_access` is false. Read: the destination's stream pulls; write: the source's stream
//!   pushes; both: each side pulls at once.
//! - latency: 4-byte peer copies back to back, the time of a batch divided by its copies.
//! - collectives: nccl-tests' sizes, formulas and #wrong check ([`verify::layout`]).
//! - training: the plan of [`crate::training::plan`] executed with NVRTC kernels, cuBLAS and
//!   NCCL ([`train`]): the golden configuration on GPU 0, the data-parallel run on every GPU,
//!   and with several GPUs the one-GPU baseline.
//!
//! GPU indices are nodecert's (NVML's order); they are mapped to CUDA ordinals by PCI bus id,
//! so CUDA_VISIBLE_DEVICES and CUDA's own ordering do not mix GPUs up.

pub mod libs;

mod copies;
mod driver;
mod gemm;
mod lt;
pub use gemm::{LOADING, LOAD_DONE, PREPARING};
pub mod nccl;
mod train;
pub mod verify;
mod worker;
pub(crate) use worker::abandon;
pub use worker::thread_abandoned;

use crate::backend::{
    BackendInfo, CollectiveSample, HostDir, MethodRun, NcclSetting, P2pMode, P2pSample, Samples,
    TrainingRun,
};
use crate::error::HwError;
use crate::inventory::normalize_bus_id;
use crate::suite::{CollectiveOp, TrainingCheck};
use crate::training::partition::Partition;
use crate::training::plan::sharded::Sharded;
use crate::training::plan::{self, Model};
use crate::units::format_bytes;
use driver::Gpu;
use libs::Lib;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use worker::{StartError, Worker};

/// Environment variable: a floor, in seconds, under every measurement's deadline. Each
/// measurement gets the larger of this and the deadline computed from its size (with the NCCL
/// set-up and training allowances): it can raise a deadline for a slow machine, never cut one.
pub const TIMEOUT_ENV: &str = "NODECERT_CUDA_TIMEOUT_S";

/// How the measurements are set up.
#[derive(Debug, Clone)]
pub struct CudaOptions {
    /// PCI bus id of each nodecert GPU index (NVML's order). Empty: CUDA's ordinals are used
    /// as indices.
    pub bus_ids: Vec<String>,
    /// Whether libcuda can be loaded (replaceable in tests).
    pub driver_loadable: fn() -> bool,
    /// Whether libnccl can be loaded.
    pub nccl_loadable: fn() -> bool,
    /// Whether libnvrtc and libcublas can be loaded (the training run needs both).
    pub nvrtc_loadable: fn() -> bool,
    pub cublas_loadable: fn() -> bool,
    /// Whether a loaded toolkit library (libnvrtc, libcublas) suits the driver's CUDA version.
    pub toolkit_check: fn(Lib) -> Result<(), HwError>,
    /// A floor under every measurement's computed deadline ([`TIMEOUT_ENV`]); None: the
    /// computed deadlines alone.
    pub timeout: Option<Duration>,
    /// The executable that measures without NVLS in a child process: nodecert itself
    /// ([`std::env::current_exe`]; replaceable in tests).
    pub self_exe: fn() -> std::io::Result<std::path::PathBuf>,
}

fn cuda_loadable() -> bool {
    Lib::Cuda.loadable()
}
fn nccl_loadable() -> bool {
    Lib::Nccl.loadable()
}
fn nvrtc_loadable() -> bool {
    Lib::Nvrtc.loadable()
}
fn cublas_loadable() -> bool {
    Lib::Cublas.loadable()
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            bus_ids: vec![],
            driver_loadable: cuda_loadable,
            nccl_loadable,
            nvrtc_loadable,
            cublas_loadable,
            toolkit_check: libs::toolkit_check,
            timeout: std::env::var(TIMEOUT_ENV)
                .ok()
                .and_then(|v| parse_timeout(&v)),
            self_exe: std::env::current_exe,
        }
    }
}

/// The value of [`TIMEOUT_ENV`]: positive seconds; None when unset or not a positive number.
pub fn parse_timeout(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(secs_saturating)
}

/// The deadline a measurement gets: the one computed for it, raised to the user's floor
/// ([`TIMEOUT_ENV`]) when that is larger. Never lower than computed: a floor below the NCCL
/// set-up allowance or a long training run's deadline would turn a working node's slow first
/// call into a timeout that poisons the worker for every later check.
pub fn effective_limit(floor: Option<Duration>, computed: Duration) -> Duration {
    floor.map_or(computed, |f| f.max(computed))
}

/// Seconds as a Duration, Duration::MAX when too large for one (`Duration::from_secs_f64`
/// panics there). A wait of Duration::MAX is a wait without deadline.
fn secs_saturating(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

/// Copies timed per sample: enough to move about 1 GiB, at least 1, at most 16 (nvbandwidth
/// times 16 copies of 512 MiB per sample; fewer keep a suite short, and the gate keeps launch
/// overhead out either way).
pub fn copies_per_sample(bytes: u64) -> u32 {
    (1u64 << 30).div_ceil(bytes.max(1)).clamp(1, 16) as u32
}

/// Device-local copies timed per sample: enough to move at least 4 GiB (as the PyTorch anchor
/// times one copy of a 4 GiB buffer, 2 ms on an H200), at least 1, at most 64. One 1 GiB copy
/// lasts about half a millisecond there, short enough that event resolution and the ramp of the
/// first copy move the figure by a percent or two.
pub fn device_copies_per_sample(bytes: u64) -> u32 {
    (4u64 << 30).div_ceil(bytes.max(1)).clamp(1, 64) as u32
}

/// For a latency measurement of `transfers` small copies: (copies per sample, samples).
pub fn latency_plan(transfers: u32) -> (u32, u32) {
    let per = if transfers >= 100 { 10 } else { 1 };
    (per, (transfers / per).max(1))
}

/// Time allowed to open the GPUs (cuInit, a context and streams per GPU).
pub const SETUP_LIMIT: Duration = Duration::from_secs(180);
/// Extra time allowed for the first collective, which creates the NCCL communicators.
pub const NCCL_INIT_LIMIT: Duration = Duration::from_secs(180);

/// The deadline of a measurement that moves `moved` bytes over the GPU links and fills or
/// checks `buffers` bytes on the CPU: a minute, plus the transfers at 0.5 GB/s and the CPU work
/// at 0.25 GB/s. Working hardware is 10-1000 times faster; missing it means a hang.
pub fn deadline(moved: f64, buffers: f64) -> Duration {
    secs_saturating(60.0 + moved.max(0.0) / 0.5e9 + buffers.max(0.0) / 0.25e9)
}

/// The deadline of a training run of `steps` steps: two minutes (opening, compiling the kernels,
/// cuBLAS handles), the GEMMs at 1 TFLOP/s (fp32 on any data-centre GPU is 10-60 times faster)
/// and every replica's parameters read back and hashed at 0.1 GB/s.
pub fn training_deadline(m: &Model, steps: usize) -> Duration {
    let flops = m.step_flops() * steps as f64;
    let bytes = m.gradient_bytes() as f64 * m.replicas as f64;
    secs_saturating(120.0 + flops / 1e12 + bytes / 0.1e9)
}

/// For each wanted bus id (NVML's), the CUDA ordinal with the same PCI bus id.
pub fn map_ordinals(wanted: &[String], cuda: &[String]) -> Vec<Option<usize>> {
    let cuda: Vec<String> = cuda.iter().map(|b| normalize_bus_id(b)).collect();
    wanted
        .iter()
        .map(|w| {
            let w = normalize_bus_id(w);
            cuda.iter().position(|c| *c == w)
        })
        .collect()
}

/// The NCCL_* variables of an environment, sorted. Read as bytes (`std::env::vars_os`): a
/// variable that is not UTF-8 makes `std::env::vars` panic; here it is decoded lossily.
pub fn nccl_env_from(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = vars
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
    v.sort();
    v
}

/// NCCL's own configuration files, in the order NCCL reads them (`initEnv`, src/misc/param.cc):
/// the file `NCCL_CONF_FILE` names when it is set, else the user's `~/.nccl.conf` (the home of
/// the passwd entry, as NCCL looks it up), then `/etc/nccl.conf`.
pub fn nccl_conf_files(conf_file: Option<&std::ffi::OsStr>, home: Option<&Path>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    match conf_file.filter(|f| !f.is_empty()) {
        Some(f) => v.push(PathBuf::from(f)),
        None => v.extend(home.map(|h| h.join(".nccl.conf"))),
    }
    v.push(PathBuf::from("/etc/nccl.conf"));
    v
}

/// The NCCL settings of a configuration file, as NCCL reads them (`getline`, the newline cut):
/// each line's name up to its first '=' and the rest as the value, nothing trimmed, not even a
/// '\r' (a name with a space in it is not the variable NCCL looks up); a line without '=' sets
/// nothing.
pub fn parse_nccl_conf(text: &str) -> Vec<(String, String)> {
    text.split('\n')
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("NCCL_") && !k.contains(char::is_whitespace))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The name under which a configuration file NCCL would read, but nodecert could not, is
/// recorded: its settings are unknown, and unknown is not "none".
pub const UNREAD_CONF: &str = "NCCL_*";

/// The NCCL settings in effect: the environment's, then those of each configuration file (as
/// [`nccl_conf_files`] lists them: its text, `Ok(None)` when there is none, `Err` why it could
/// not be read) for a name the environment does not set, the value followed by the file it
/// comes from. NCCL sets a file's variable only where the environment has none; which of two
/// files wins has changed between NCCL versions, so both are kept. A file that exists but could
/// not be read is [`UNREAD_CONF`]. Sorted by name.
pub fn nccl_settings_from(
    env: Vec<(String, String)>,
    files: &[(PathBuf, Result<Option<String>, String>)],
) -> Vec<NcclSetting> {
    let set: std::collections::BTreeSet<String> = env.iter().map(|(k, _)| k.clone()).collect();
    let mut out: Vec<NcclSetting> = env
        .into_iter()
        .map(|(name, value)| NcclSetting {
            name,
            value,
            from: None,
        })
        .collect();
    for (path, text) in files {
        match text {
            Ok(text) => {
                for (name, value) in text.as_deref().map(parse_nccl_conf).unwrap_or_default() {
                    if !set.contains(&name) {
                        out.push(NcclSetting {
                            name,
                            value,
                            from: Some(path.clone()),
                        });
                    }
                }
            }
            Err(why) => out.push(NcclSetting::env(
                UNREAD_CONF,
                &format!("unknown: {} could not be read ({why})", path.display()),
            )),
        }
    }
    out.sort();
    out
}

/// The home folder of this process's user from the passwd database, as NCCL finds its
/// `~/.nccl.conf` (not `$HOME`).
pub fn passwd_home() -> Option<PathBuf> {
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: getpwuid_r writes the entry into `pw` and its strings into `buf` (of the length
    // given); `found` is null or points at `pw`. Nothing is kept past this function but an
    // owned copy of the home folder.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::getuid(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || pw.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pw.pw_dir);
        use std::os::unix::ffi::OsStrExt;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
    }
}

/// The NCCL settings in effect for this process: its environment's and NCCL's configuration
/// files' ([`nccl_settings_from`]), each file read within the bound of a system file and
/// decoded as NCCL takes it (bytes; what is not UTF-8 shown replaced).
pub fn nccl_settings() -> Vec<NcclSetting> {
    let env = nccl_env_from(std::env::vars_os());
    let conf = std::env::var_os("NCCL_CONF_FILE");
    let files: Vec<(PathBuf, Result<Option<String>, String>)> =
        nccl_conf_files(conf.as_deref(), passwd_home().as_deref())
            .into_iter()
            .map(|p| {
                let text = match crate::fsio::read::read(&p, crate::fsio::read::Kind::System) {
                    Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e.to_string()),
                };
                (p, text)
            })
            .collect();
    nccl_settings_from(env, &files)
}

/// Add what the CUDA side knows to the backend description: library files and versions, the
/// NCCL version, and the NCCL `settings` in effect as [`nccl_settings`] read them when the
/// backend opened (one reading for the evidence and the checks: once NCCL has started, its
/// configuration files' values sit in the environment and would read as the user's own). Loads
/// libraries (never creates a context).
pub fn extend_info(info: &mut BackendInfo, settings: &[NcclSetting]) {
    if info.name == "nvml" {
        info.name = "nvml+cuda".into();
    }
    info.libraries.extend(libs::library_infos());
    if Lib::Nccl.loadable() {
        // A missing symbol makes cudarc panic; the version is then simply unknown.
        info.nccl_version = std::panic::catch_unwind(nccl::version)
            .ok()
            .and_then(Result::ok);
    }
    info.nccl_env = NcclSetting::in_evidence(settings);
}

/// cuInit's CUDA_ERROR_NO_DEVICE on a node whose driver lists `listed` GPUs: the measurement
/// fails saying so, and the inventory (read through NVML) still describes the node.
fn no_cuda_device(listed: usize, visible: &str) -> HwError {
    HwError::Unavailable {
        what: "a CUDA device".into(),
        detail: format!(
            "CUDA sees no GPU (cuInit: CUDA_ERROR_NO_DEVICE){}{visible}; check \
             CUDA_VISIBLE_DEVICES, the container's GPU access and /dev/nvidia*",
            if listed > 0 {
                format!(" although the driver lists {listed}")
            } else {
                String::new()
            }
        ),
    }
}

/// The GPU state, owned by the worker thread.
///
/// Fields drop in declaration order: the NCCL communicators go before the contexts they use.
pub(crate) struct Cuda {
    nccl: Option<nccl::Comms>,
    /// Peer access results by (accessing GPU, owning GPU).
    peers: HashMap<(usize, usize), bool>,
    /// By nodecert index; Err: not visible to CUDA (the reason says why).
    gpus: Vec<Result<Gpu, String>>,
    /// A copy gate stalled once: copies are timed without it from then on.
    gate_stalled: std::sync::atomic::AtomicBool,
}

impl Cuda {
    fn open(bus_ids: Vec<String>) -> Result<Cuda, HwError> {
        use cudarc::driver::{result, sys};
        let visible = std::env::var("CUDA_VISIBLE_DEVICES")
            .map(|v| format!(" (CUDA_VISIBLE_DEVICES={v})"))
            .unwrap_or_default();
        match result::init() {
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => {
                return Err(no_cuda_device(bus_ids.len(), &visible))
            }
            Err(e) => {
                return Err(HwError::Call {
                    call: "cuInit".into(),
                    detail: format!("{}{}", driver::describe(&e), driver::init_refused_hint(e.0)),
                })
            }
            Ok(()) => {}
        }
        let count = driver::ck("cuDeviceGetCount", result::device::get_count())?.max(0) as usize;
        if count == 0 {
            return Err(HwError::Unavailable {
                what: "a CUDA device".into(),
                detail: format!("cuDeviceGetCount reports none{visible}"),
            });
        }
        let cuda_ids = (0..count)
            .map(driver::pci_bus_id)
            .collect::<Result<Vec<_>, _>>()?;
        let map: Vec<(Option<usize>, String)> = if bus_ids.is_empty() {
            (0..count).map(|o| (Some(o), cuda_ids[o].clone())).collect()
        } else {
            map_ordinals(&bus_ids, &cuda_ids)
                .into_iter()
                .zip(bus_ids)
                .collect()
        };
        // A GPU that cannot be opened (a context or stream refused: a GPU in a bad state, or
        // held by another process in exclusive mode) is that GPU's trouble, said by name on
        // whatever needs it; the others are still measured.
        let mut gpus = Vec::new();
        for (i, (ord, bus)) in map.into_iter().enumerate() {
            gpus.push(match ord {
                Some(o) => Gpu::open(i, o, normalize_bus_id(&cuda_ids[o]))
                    .map_err(|e| format!("GPU {i} ({bus}) could not be opened: {e}")),
                None => Err(format!("GPU {i} ({bus}) is not visible to CUDA{visible}")),
            });
        }
        Ok(Cuda {
            nccl: None,
            peers: HashMap::new(),
            gpus,
            gate_stalled: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn gpu(&self, i: usize) -> Result<&Gpu, HwError> {
        match self.gpus.get(i) {
            Some(Ok(g)) => Ok(g),
            Some(Err(why)) => Err(HwError::Unavailable {
                what: format!("GPU {i}"),
                detail: why.clone(),
            }),
            None => Err(HwError::NotSupported(format!(
                "GPU {i}: the node has {} GPUs",
                self.gpus.len()
            ))),
        }
    }

    fn all(&self) -> Result<Vec<&Gpu>, HwError> {
        (0..self.gpus.len()).map(|i| self.gpu(i)).collect()
    }

    /// Every GPU of this node into `comm` across nodes, then each op at each size; the
    /// communicators are released at the end, whatever happened.
    fn fabric_collective(
        &mut self,
        comm: &crate::backend::FabricComm,
        ops: &[CollectiveOp],
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Vec<CollectiveSample>>, HwError> {
        let gpus = self.all()?;
        if comm.first_rank + gpus.len() > comm.ranks {
            return Err(HwError::Call {
                call: "NCCL across nodes".into(),
                detail: format!(
                    "this node's {} GPUs as ranks {}.. do not fit a communicator of {}",
                    gpus.len(),
                    comm.first_rank,
                    comm.ranks
                ),
            });
        }
        let comms = nccl::Comms::init_ranks(&gpus, &comm.id, comm.first_rank, comm.ranks)?;
        ops.iter()
            .map(|&op| {
                sizes
                    .iter()
                    .map(|&b| {
                        nccl::measure_span(
                            &comms,
                            &gpus,
                            comm.first_rank,
                            comm.ranks,
                            op,
                            b,
                            warmup,
                            iters,
                        )
                    })
                    .collect()
            })
            .collect()
    }

    fn collective(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<CollectiveSample, HwError> {
        let comms = match self.nccl.take() {
            Some(c) => c,
            None => nccl::Comms::init(&self.all()?)?,
        };
        let r = nccl::measure(&comms, &self.all()?, op, bytes, warmup, iters);
        // Keep the communicators unless the run failed: a failed communicator is not reused.
        if r.is_ok() {
            self.nccl = Some(comms);
        }
        r
    }
}

enum State {
    Idle,
    Ready(Worker<Cuda>),
    /// Opening failed; the same error every time (a missing library does not come back).
    Failed(HwError),
    /// Opening hung.
    Poisoned(HwError),
}

/// The measurement half of the real backend. See the module documentation.
pub struct CudaMeasurements {
    opts: CudaOptions,
    state: State,
    /// Whether the worker holds NCCL communicators (the next NCCL measurement need not make
    /// them, and gets no [`NCCL_INIT_LIMIT`]).
    nccl_ready: bool,
}

fn dir_name(d: HostDir) -> &'static str {
    match d {
        HostDir::H2d => "host-to-device",
        HostDir::D2h => "device-to-host",
        HostDir::Bidir => "host-to-device and device-to-host",
    }
}

impl CudaMeasurements {
    pub fn new(opts: CudaOptions) -> Self {
        CudaMeasurements {
            opts,
            state: State::Idle,
            nccl_ready: false,
        }
    }

    fn worker(&mut self) -> Result<&mut Worker<Cuda>, HwError> {
        if let State::Idle = self.state {
            self.state = if !(self.opts.driver_loadable)() {
                State::Failed(libs::missing(Lib::Cuda))
            } else {
                let ids = self.opts.bus_ids.clone();
                let what = "opening the GPUs (cuInit, contexts, streams)";
                let limit = effective_limit(self.opts.timeout, SETUP_LIMIT);
                match Worker::start("nodecert-cuda", what, limit, move || Cuda::open(ids)) {
                    Ok(w) => State::Ready(w),
                    Err(StartError::Failed(e)) => State::Failed(e),
                    Err(StartError::TimedOut(e)) => {
                        self.state =
                            State::Poisoned(worker::poisoned_error(what, limit.as_secs_f64()));
                        return Err(e);
                    }
                }
            };
        }
        match &mut self.state {
            State::Ready(w) => Ok(w),
            State::Failed(e) | State::Poisoned(e) => Err(e.clone()),
            State::Idle => Err(HwError::Call {
                call: "opening the GPUs".into(),
                detail: "not started".into(),
            }),
        }
    }

    fn run<R, F>(&mut self, what: String, limit: Duration, f: F) -> Result<R, HwError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Cuda) -> Result<R, HwError> + Send + 'static,
    {
        let limit = effective_limit(self.opts.timeout, limit);
        self.worker()?.call(&what, limit, f)
    }

    fn one<T>(v: Vec<T>) -> Result<T, HwError> {
        v.into_iter().next().ok_or_else(|| HwError::Call {
            call: "measurement".into(),
            detail: "no result".into(),
        })
    }

    pub fn host_copy(
        &mut self,
        gpu: usize,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        let dirs = if dir == HostDir::Bidir { 2.0 } else { 1.0 };
        let moved = bytes as f64 * dirs * copies_per_sample(bytes) as f64 * (warmup + iters) as f64;
        let what = format!(
            "{} copies of {} on GPU {gpu}",
            dir_name(dir),
            format_bytes(bytes)
        );
        self.run(what, deadline(moved, 2.0 * dirs * bytes as f64), move |c| {
            let g = c.gpu(gpu)?;
            Self::one(c.host_copy_on(&[g], dir, bytes, warmup, iters)?)
        })
    }

    pub fn host_copy_all(
        &mut self,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Samples>, HwError> {
        let n = self.opts.bus_ids.len().max(1) as f64;
        let dirs = if dir == HostDir::Bidir { 2.0 } else { 1.0 };
        let moved =
            n * bytes as f64 * dirs * copies_per_sample(bytes) as f64 * (warmup + iters) as f64;
        let what = format!(
            "{} copies of {} on all GPUs at once",
            dir_name(dir),
            format_bytes(bytes)
        );
        self.run(
            what,
            deadline(moved, 2.0 * n * dirs * bytes as f64),
            move |c| {
                let gpus = c.all()?;
                c.host_copy_on(&gpus, dir, bytes, warmup, iters)
            },
        )
    }

    pub fn device_copy(
        &mut self,
        gpu: usize,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        let moved =
            2.0 * bytes as f64 * device_copies_per_sample(bytes) as f64 * (warmup + iters) as f64;
        let what = format!("device copies of {} on GPU {gpu}", format_bytes(bytes));
        self.run(
            what,
            deadline(moved / 100.0, 2.0 * bytes as f64),
            move |c| {
                let g = c.gpu(gpu)?;
                c.device_copy_on(g, bytes, warmup, iters)
            },
        )
    }

    pub fn p2p_copy(
        &mut self,
        src: usize,
        dst: usize,
        mode: P2pMode,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<P2pSample, HwError> {
        let dirs = if mode == P2pMode::Bidir { 2.0 } else { 1.0 };
        let moved = bytes as f64 * dirs * copies_per_sample(bytes) as f64 * (warmup + iters) as f64;
        let what = format!(
            "peer copies ({mode:?}) of {} from GPU {src} to GPU {dst}",
            format_bytes(bytes)
        )
        .to_lowercase();
        self.run(what, deadline(moved, 2.0 * dirs * bytes as f64), move |c| {
            c.p2p_copy(src, dst, mode, bytes, warmup, iters)
        })
    }

    pub fn p2p_latency(&mut self, src: usize, dst: usize, iters: u32) -> Result<Samples, HwError> {
        let what = format!("peer latency from GPU {src} to GPU {dst}");
        let limit = deadline(iters as f64 * 1e5, 0.0);
        self.run(what, limit, move |c| c.p2p_latency(src, dst, iters))
    }

    /// The deadline of one collective of `bytes` per rank over the node's GPUs, without the
    /// NCCL set-up allowance.
    fn collective_limit(&self, bytes: u64, warmup: u32, iters: u32) -> Duration {
        let n = self.opts.bus_ids.len().max(1) as f64;
        // All-reduce moves about 2x its size per rank; allow for it whatever the op.
        let moved = 2.0 * n * bytes as f64 * (warmup + iters + 1) as f64;
        deadline(moved, 2.0 * n * bytes as f64)
    }

    pub fn collective(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<CollectiveSample, HwError> {
        // libcuda first: without it nothing runs, whatever NCCL does.
        self.worker()?;
        if !(self.opts.nccl_loadable)() {
            return Err(libs::missing(Lib::Nccl));
        }
        let mut limit = self.collective_limit(bytes, warmup, iters);
        if !self.nccl_ready {
            limit = limit.saturating_add(NCCL_INIT_LIMIT);
        }
        let what = format!("NCCL {op} of {}", format_bytes(bytes));
        let r = self.run(what, limit, move |c| c.collective(op, bytes, warmup, iters));
        // A failed collective drops the communicators: the next one makes them again.
        self.nccl_ready = r.is_ok();
        r
    }

    /// Whether NCCL can run across nodes here: the GPUs open and libnccl loads. A missing
    /// library or a driver that does not answer is an error of this node, not NotSupported.
    pub fn fabric_supported(&mut self) -> Result<(), HwError> {
        self.worker()?;
        if !(self.opts.nccl_loadable)() {
            return Err(libs::missing(Lib::Nccl));
        }
        Ok(())
    }

    /// A new NCCL unique id, for a communicator across nodes that this node starts.
    pub fn fabric_id(&mut self) -> Result<Vec<u8>, HwError> {
        self.fabric_supported()?;
        self.run("ncclGetUniqueId".into(), Duration::from_secs(60), |_| {
            nccl::unique_id()
        })
    }

    /// Collectives across nodes ([`crate::backend::Backend::fabric_collective`]), under one
    /// deadline: NCCL's set-up (every rank of every node must join) and each op and size as a
    /// collective over the whole communicator. A hang (a node that never joins, a link that
    /// stalls mid-collective) ends this backend's measurements, as a hung collective in the
    /// node does.
    pub fn fabric_collective(
        &mut self,
        comm: &crate::backend::FabricComm,
        ops: &[CollectiveOp],
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Vec<CollectiveSample>>, HwError> {
        self.worker()?;
        if !(self.opts.nccl_loadable)() {
            return Err(libs::missing(Lib::Nccl));
        }
        let ranks = comm.ranks.max(1) as f64;
        let limit = ops
            .iter()
            .flat_map(|_| sizes.iter())
            .map(|&b| {
                let moved = 2.0 * ranks * b as f64 * (warmup + iters + 1) as f64;
                deadline(moved, 2.0 * ranks * b as f64)
            })
            .fold(NCCL_INIT_LIMIT, |a, b| a.saturating_add(b));
        let what = format!(
            "NCCL across {} nodes ({} ranks, this node's from rank {})",
            comm.nodes, comm.ranks, comm.first_rank
        );
        let (comm, ops, sizes) = (comm.clone(), ops.to_vec(), sizes.to_vec());
        self.run(what, limit, move |c| {
            c.fabric_collective(&comm, &ops, &sizes, warmup, iters)
        })
    }

    /// The sweep with NVLS forced off, in a child process (see [`crate::backend::no_nvls`] for
    /// why). Its deadline: every size's, plus opening the GPUs and making the communicators.
    /// A child that hangs is killed, and like a hung measurement here it ends this backend's
    /// measurements: the GPUs may still be busy with it.
    pub fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<CollectiveSample>, HwError> {
        use crate::backend::no_nvls;
        if let State::Failed(e) | State::Poisoned(e) = &self.state {
            return Err(e.clone());
        }
        if !(self.opts.driver_loadable)() {
            return Err(libs::missing(Lib::Cuda));
        }
        if !(self.opts.nccl_loadable)() {
            return Err(libs::missing(Lib::Nccl));
        }
        let exe = (self.opts.self_exe)().map_err(|e| HwError::Call {
            call: "finding nodecert's own executable to measure without NVLS".into(),
            detail: e.to_string(),
        })?;
        let limit = sizes
            .iter()
            .map(|&b| self.collective_limit(b, warmup, iters))
            .fold(SETUP_LIMIT.saturating_add(NCCL_INIT_LIMIT), |a, b| {
                a.saturating_add(b)
            });
        let limit = effective_limit(self.opts.timeout, limit);
        // The child opens every GPU and makes its own communicators: this process's (NVLS
        // buffers and channels on every GPU) are released first, as the sharded training runs
        // do, rather than held beside the child's for the whole sweep.
        if self.nccl_ready {
            self.nccl_ready = false;
            self.run(
                "releasing the NCCL communicators before the sweep without NVLS".into(),
                Duration::from_secs(60),
                |c| {
                    c.nccl = None;
                    Ok(())
                },
            )?;
        }
        let req = no_nvls::Request::new(
            op,
            sizes,
            warmup,
            iters,
            no_nvls::Target::Real {
                bus_ids: self.opts.bus_ids.clone(),
            },
        );
        let r = no_nvls::measure(&exe, &req, limit);
        if let Err(HwError::Timeout { what, seconds }) = &r {
            self.state = State::Poisoned(worker::poisoned_error(what, *seconds));
        }
        r
    }

    /// The GPUs opened and a libcublas that loads and suits the driver, before any GEMM; for
    /// fp8, a libcublasLt that suits it too (whether it loads is asked after the GPU's compute
    /// capability, so that a GPU without fp8 says so whatever the libraries).
    fn need_cublas(&mut self, p: crate::suite::GemmPrecision) -> Result<(), HwError> {
        self.worker()?;
        if !(self.opts.cublas_loadable)() {
            return Err(libs::missing(Lib::Cublas));
        }
        (self.opts.toolkit_check)(Lib::Cublas)?;
        if p == crate::suite::GemmPrecision::Fp8 {
            (self.opts.toolkit_check)(Lib::CublasLt)?;
        }
        Ok(())
    }

    /// The compute check's GEMMs on one GPU ([`gemm`]). Its deadline: a minute, the GEMMs at 1
    /// TFLOP/s, the buffers moved at 0.25 GB/s and the product checked at 10^8 elements a
    /// second.
    pub fn gemm(
        &mut self,
        gpu: usize,
        precision: crate::suite::GemmPrecision,
        n: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<crate::backend::GemmSample, HwError> {
        self.need_cublas(precision)?;
        let side = n as f64;
        let flops =
            2.0 * side.powi(3) * f64::from(gemm::gemms_per_sample(n)) * f64::from(warmup + iters);
        let limit = secs_saturating(
            60.0 + flops / 1e12 + 12.0 * side * side / 0.25e9 + 20.0 * side * side / 1e8,
        );
        let what = format!("{precision} GEMMs of {n}x{n}x{n} on GPU {gpu}");
        self.run(what, limit, move |c| {
            c.gemm(gpu, precision, n, warmup, iters)
        })
    }

    /// Every GPU at once under GEMMs for `seconds` ([`gemm`]): per GPU, the rate of each window
    /// of about `window_ms`, and the last product's check. Its deadline: the load, two minutes
    /// (opening, operands, cuBLAS) and every GPU's product checked at 10^8 elements a second.
    pub fn sustained_gemm(
        &mut self,
        precision: crate::suite::GemmPrecision,
        n: u64,
        seconds: f64,
        window_ms: u32,
        load: std::sync::Arc<std::sync::atomic::AtomicU8>,
    ) -> Result<Vec<(Vec<f64>, crate::backend::gemm_data::ProductCheck)>, HwError> {
        self.need_cublas(precision)?;
        let gpus = self.opts.bus_ids.len().max(1) as f64;
        let side = n as f64;
        let limit = secs_saturating(
            seconds + 120.0 + gpus * (12.0 * side * side / 0.25e9 + 20.0 * side * side / 1e8),
        );
        let what =
            format!("sustained {precision} GEMMs of {n}x{n}x{n} on every GPU for {seconds} s");
        self.run(what, limit, move |c| {
            c.sustained_gemm(precision, n, seconds, window_ms, &load)
        })
    }

    /// The reference training run: the golden configuration on GPU 0 (inputs checked against
    /// the CPU first), the data-parallel run on every GPU, and with several GPUs the one-GPU
    /// baseline. Each is one measurement with its own deadline.
    pub fn training(&mut self, cfg: &TrainingCheck) -> Result<TrainingRun, HwError> {
        self.training_libraries()?;
        let golden = Model::golden(cfg)?;
        let n = self.run("counting the GPUs".into(), Duration::from_secs(60), |c| {
            Ok(c.gpus.len())
        })?;
        let main = Model::main(cfg, n)?;
        if main.math == plan::Math::Bf16 {
            // Before the golden run: a GPU without bf16 tensor cores is refused at once, by name.
            let m = main.clone();
            let what = "reading the GPUs' compute capabilities".to_string();
            self.run(what, Duration::from_secs(60), move |c| {
                for g in c.all()? {
                    let cc = driver::ck(
                        "cuDeviceGetAttribute(COMPUTE_CAPABILITY)",
                        g.ctx.compute_capability(),
                    )?;
                    plan::check_arch(&m, cc, &g.label())?;
                }
                Ok(())
            })?;
        }
        if n > 1 && !(self.opts.nccl_loadable)() {
            return Err(libs::missing(Lib::Nccl));
        }

        let gsteps = cfg.golden_steps;
        let what = format!(
            "golden training run ({gsteps} steps of {:?}, batch {}) on GPU 0",
            golden.layers, golden.local_batch
        );
        let limit = training_deadline(&golden, gsteps);
        let golden_run = self.run(what, limit, move |c| train::golden(c, &golden, gsteps))?;

        let (steps, warmup) = (cfg.steps, plan::warmup_steps(cfg.steps));
        let mut limit = training_deadline(&main, steps);
        if n > 1 && !self.nccl_ready {
            limit = limit.saturating_add(NCCL_INIT_LIMIT);
        }
        let what = format!(
            "training run ({steps} steps of {:?}, batch {} per GPU) on {n} GPU{}",
            main.layers,
            main.local_batch,
            if n == 1 { "" } else { "s" }
        );
        let r = self.run(what, limit, move |c| {
            train::data_parallel(c, &main, steps, warmup)
        });
        if n > 1 {
            // As for collectives: a failed run drops the communicators.
            self.nccl_ready = r.is_ok();
        }
        let main_run = r?;

        let single = if n > 1 {
            let one = Model::main(cfg, 1)?;
            let s = plan::WARMUP_STEPS + plan::SINGLE_GPU_TIMED_STEPS;
            let what = format!("one-GPU baseline training run ({s} steps) on GPU 0");
            let limit = training_deadline(&one, s);
            Some(self.run(what, limit, move |c| {
                train::data_parallel(c, &one, s, plan::WARMUP_STEPS)
            })?)
        } else {
            None
        };
        Ok(plan::training_run(
            cfg,
            n,
            &golden_run,
            &main_run,
            single.as_ref(),
        ))
    }

    /// The worker, and the libraries a training run needs, each loadable and no newer than the
    /// driver: checked before compiling or loading anything, so that a libnvrtc or libcublas
    /// newer than the driver fails with its path, not later as an opaque PTX or cuBLAS error.
    fn training_libraries(&mut self) -> Result<(), HwError> {
        self.worker()?;
        for (lib, loadable) in [
            (Lib::Nvrtc, self.opts.nvrtc_loadable),
            (Lib::Cublas, self.opts.cublas_loadable),
        ] {
            if !loadable() {
                return Err(libs::missing(lib));
            }
            (self.opts.toolkit_check)(lib)?;
        }
        Ok(())
    }

    /// The suite's model partitioned as `p` over every GPU: the golden configuration so
    /// partitioned (inputs checked against the CPU first), then the timed run; the ranks'
    /// agreement checked after each. Each is one measurement with its own deadline, and its
    /// communicators live only as long as it.
    pub fn training_method(
        &mut self,
        cfg: &TrainingCheck,
        p: Partition,
    ) -> Result<MethodRun, HwError> {
        self.training_libraries()?;
        if !(self.opts.nccl_loadable)() {
            return Err(libs::missing(Lib::Nccl));
        }
        let n = self.run("counting the GPUs".into(), Duration::from_secs(60), |c| {
            Ok(c.gpus.len())
        })?;
        if p.gpus() != n {
            return Err(HwError::NotSupported(format!(
                "{p:?} needs {} GPUs; {n} are here",
                p.gpus()
            )));
        }
        let golden = Sharded::golden(cfg, p)?;
        let main = Sharded::new(Model::main(cfg, p.dp())?, p)?;
        // The sharded runs release the node-wide communicators (train::sharded).
        self.nccl_ready = false;
        let gsteps = cfg.golden_steps;
        let what = format!(
            "golden training run ({gsteps} steps of {:?}) partitioned {p:?}",
            golden.base().layers
        );
        let limit = training_deadline(golden.base(), gsteps).saturating_add(NCCL_INIT_LIMIT);
        let g = golden.clone();
        let golden_run = self.run(what, limit, move |c| {
            let opts = plan::TrainOpts {
                steps: gsteps,
                warmup: gsteps,
                verify_inputs: true,
            };
            train::sharded(c, &g, &opts)
        })?;
        let (steps, warmup) = (cfg.steps, plan::warmup_steps(cfg.steps));
        let what = format!(
            "training run ({steps} steps of {:?}, batch {} per group) partitioned {p:?}",
            main.base().layers,
            main.base().local_batch
        );
        let limit = training_deadline(main.base(), steps).saturating_add(NCCL_INIT_LIMIT);
        let m = main.clone();
        let main_run = self.run(what, limit, move |c| {
            let opts = plan::TrainOpts {
                steps,
                warmup,
                verify_inputs: false,
            };
            train::sharded(c, &m, &opts)
        })?;
        let inconsistency = [("golden", &golden_run), ("timed", &main_run)]
            .into_iter()
            .find_map(|(which, o)| {
                o.consistency(p)
                    .err()
                    .map(|e| format!("in the {which} run, {e}"))
            });
        Ok(MethodRun {
            tp: p.tp(),
            dp: p.dp(),
            golden_node_losses: golden_run.losses.iter().map(|&v| f64::from(v)).collect(),
            step_ms: main_run.times.step_ms,
            comm_ms: main_run.times.comm_ms,
            exposed_comm_ms: main_run.times.exposed_ms,
            samples_per_step: cfg.batch * p.dp(),
            inconsistency,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_move_about_a_gib_per_sample() {
        assert_eq!(copies_per_sample(256 << 20), 4);
        assert_eq!(copies_per_sample(512 << 20), 2);
        assert_eq!(copies_per_sample(1 << 30), 1);
        assert_eq!(copies_per_sample(4 << 30), 1);
        assert_eq!(copies_per_sample(4096), 16);
        assert_eq!(copies_per_sample(0), 16);
        // Device copies move 4 GiB per sample, as the PyTorch anchor's one 4 GiB copy does.
        assert_eq!(device_copies_per_sample(1 << 30), 4);
        assert_eq!(device_copies_per_sample(4 << 30), 1);
        assert_eq!(device_copies_per_sample(3 << 30), 2);
        assert_eq!(device_copies_per_sample(8 << 30), 1);
        assert_eq!(device_copies_per_sample(1 << 20), 64);
        assert_eq!(device_copies_per_sample(0), 64);
        assert_eq!(latency_plan(1000), (10, 100));
        assert_eq!(latency_plan(100), (10, 10));
        assert_eq!(latency_plan(50), (1, 50));
        assert_eq!(latency_plan(0), (1, 1));
    }

    #[test]
    fn deadlines_grow_with_the_work_and_start_at_a_minute() {
        assert_eq!(deadline(0.0, 0.0), Duration::from_secs(60));
        let d = deadline(25e9, 0.5e9);
        assert_eq!(d, Duration::from_secs(60 + 50 + 2));
        assert!(deadline(1e12, 0.0) > deadline(1e11, 0.0));
        // Absurd sizes saturate instead of panicking in Duration::from_secs_f64.
        assert_eq!(deadline(1e30, 0.0), Duration::MAX);
        assert_eq!(deadline(f64::NAN, 0.0), Duration::from_secs(60));
    }

    #[test]
    fn no_cuda_device_says_so_and_names_the_visible_devices() {
        let e = no_cuda_device(8, " (CUDA_VISIBLE_DEVICES=)").to_string();
        assert!(
            e.starts_with("a CUDA device is not available: CUDA sees no GPU"),
            "{e}"
        );
        assert!(
            e.contains("the driver lists 8 (CUDA_VISIBLE_DEVICES=)"),
            "{e}"
        );
    }

    #[test]
    fn the_timeout_variable_raises_deadlines_and_never_cuts_them() {
        let s = Duration::from_secs;
        assert_eq!(effective_limit(None, s(240)), s(240));
        // Below the computed deadline (the NCCL set-up allowance, a long training run): kept.
        assert_eq!(effective_limit(Some(s(120)), s(240)), s(240));
        assert_eq!(effective_limit(Some(s(120)), SETUP_LIMIT), SETUP_LIMIT);
        // Above it: raised.
        assert_eq!(effective_limit(Some(s(900)), s(240)), s(900));
        assert_eq!(effective_limit(Some(Duration::MAX), s(1)), Duration::MAX);
    }

    #[test]
    fn the_timeout_variable_is_read_without_panicking() {
        assert_eq!(parse_timeout(" 90 "), Some(Duration::from_secs(90)));
        assert_eq!(parse_timeout("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_timeout("1e30"), Some(Duration::MAX));
        for bad in ["", "0", "-3", "inf", "NaN", "ten"] {
            assert_eq!(parse_timeout(bad), None, "{bad}");
        }
    }

    #[test]
    fn gpus_are_matched_to_cuda_ordinals_by_bus_id() {
        let nvml = vec![
            "00000000:1B:00.0".to_string(),
            "00000000:3B:00.0".to_string(),
            "00000000:5E:00.0".to_string(),
        ];
        // CUDA orders fastest first and CUDA_VISIBLE_DEVICES hides one.
        let cuda = vec!["0000:3B:00.0".to_string(), "0000:1b:00.0".to_string()];
        assert_eq!(map_ordinals(&nvml, &cuda), vec![Some(1), Some(0), None]);
        assert_eq!(map_ordinals(&[], &cuda), Vec::<Option<usize>>::new());
    }

    #[test]
    fn nccl_reads_its_configuration_files_where_the_environment_is_silent() {
        let home = Path::new("/home/u");
        assert_eq!(
            nccl_conf_files(None, Some(home)),
            [PathBuf::from("/home/u/.nccl.conf"), "/etc/nccl.conf".into()]
        );
        // NCCL_CONF_FILE replaces the user's file, not the system's; empty counts as unset.
        assert_eq!(
            nccl_conf_files(Some("/opt/x.conf".as_ref()), Some(home)),
            [PathBuf::from("/opt/x.conf"), "/etc/nccl.conf".into()]
        );
        assert_eq!(
            nccl_conf_files(Some("".as_ref()), None),
            [PathBuf::from("/etc/nccl.conf")]
        );
        assert_eq!(
            parse_nccl_conf("# NCCL_ALGO=Tree\nNCCL_P2P_LEVEL=NVL\nNCCL_PROTO = LL\nOTHER=1\nNCCL_X\nNCCL_IB_HCA==mlx5_0\n"),
            [
                ("NCCL_P2P_LEVEL".to_string(), "NVL".to_string()),
                ("NCCL_IB_HCA".to_string(), "=mlx5_0".to_string()),
            ]
        );
        let env = vec![("NCCL_ALGO".to_string(), "Ring".to_string())];
        let files = [
            (
                PathBuf::from("/root/.nccl.conf"),
                Ok(Some("NCCL_ALGO=Tree\nNCCL_P2P_DISABLE=1\r\n".to_string())),
            ),
            (PathBuf::from("/etc/nccl.conf"), Ok(None)),
            (
                PathBuf::from("/opt/n.conf"),
                Err("Permission denied".to_string()),
            ),
        ];
        assert_eq!(
            nccl_settings_from(env, &files),
            [
                NcclSetting::env(
                    "NCCL_*",
                    "unknown: /opt/n.conf could not be read (Permission denied)"
                ),
                NcclSetting::env("NCCL_ALGO", "Ring"),
                NcclSetting {
                    name: "NCCL_P2P_DISABLE".into(),
                    // NCCL keeps the '\r' of a file written on Windows.
                    value: "1\r".into(),
                    from: Some(PathBuf::from("/root/.nccl.conf")),
                },
            ]
        );
        // The home of this process's user in the passwd database (whatever $HOME says), as
        // /etc/passwd lists it where it does.
        let uid = unsafe { libc::getuid() };
        let listed = std::fs::read_to_string("/etc/passwd")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 5 && f[2] == uid.to_string()).then(|| PathBuf::from(f[5]))
            });
        if let Some(home) = listed {
            assert_eq!(passwd_home(), Some(home));
        }
    }

    #[test]
    fn nccl_environment_is_recorded_sorted() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let vars = vec![
            ("PATH".into(), "/bin".into()),
            ("NCCL_P2P_LEVEL".into(), "NVL".into()),
            ("NCCL_DEBUG".into(), "WARN".into()),
            ("XNCCL_NOT".into(), "1".into()),
            // Not UTF-8: std::env::vars would panic on it.
            ("NCCL_ALGO".into(), OsString::from_vec(b"Ring\xff".to_vec())),
        ];
        assert_eq!(
            nccl_env_from(vars.into_iter()),
            vec![
                ("NCCL_ALGO".to_string(), "Ring\u{fffd}".to_string()),
                ("NCCL_DEBUG".to_string(), "WARN".to_string()),
                ("NCCL_P2P_LEVEL".to_string(), "NVL".to_string()),
            ]
        );
    }

    fn without_libraries() -> CudaMeasurements {
        CudaMeasurements::new(CudaOptions {
            bus_ids: vec!["00000000:3B:00.0".into()],
            driver_loadable: || false,
            nccl_loadable: || false,
            nvrtc_loadable: || false,
            cublas_loadable: || false,
            toolkit_check: |_| Ok(()),
            timeout: None,
            self_exe: std::env::current_exe,
        })
    }

    /// A stand-in for nodecert's child that answers as one whose measurement hung.
    fn hung_child() -> std::io::Result<std::path::PathBuf> {
        let p = std::env::temp_dir().join(format!("nodecert-hung-child-{}", std::process::id()));
        let reply = r#"{"protocol":1,"nvls_enable":"0","result":{"Err":{"timeout":{"what":"NCCL all_reduce of 1 MiB","seconds":240.0}}}}"#;
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho '{}{reply}'\n",
                crate::backend::no_nvls::REPLY_MARK
            ),
        )?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        Ok(p)
    }

    #[test]
    fn a_hang_in_the_child_without_nvls_ends_the_measurements_here_too() {
        let mut m = CudaMeasurements::new(CudaOptions {
            driver_loadable: || true,
            nccl_loadable: || true,
            self_exe: hung_child,
            ..without_libraries().opts
        });
        // A script just written can be "busy" for a moment when another test thread forks
        // meanwhile (its copy of the descriptor lives until it execs): try again then.
        let mut e = None;
        for _ in 0..20 {
            match m.collective_no_nvls(CollectiveOp::AllReduce, &[1 << 20], 1, 2) {
                Err(x) if x.to_string().contains("os error 26") => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                r => {
                    e = r.err();
                    break;
                }
            }
        }
        let e = e.expect("an error");
        assert_eq!(
            e.to_string(),
            "NCCL all_reduce of 1 MiB did not finish within 240 s"
        );
        // The GPUs may still be busy with the child: nothing more runs, and the error says why.
        let later = m
            .collective(CollectiveOp::AllReduce, 1 << 20, 1, 2)
            .unwrap_err()
            .to_string();
        assert!(later.contains("cannot be recovered"), "{later}");
        let _ = std::fs::remove_file(hung_child().unwrap());
    }

    fn assert_no_driver(r: Result<impl std::fmt::Debug, HwError>) {
        match r {
            Err(HwError::Unavailable { what, detail }) => {
                assert_eq!(what, "libcuda.so.1");
                assert!(detail.ends_with("GPU measurements cannot run"), "{detail}");
            }
            other => panic!("expected a missing-libcuda error, got {other:?}"),
        }
    }

    #[test]
    fn without_libcuda_every_measurement_is_an_error_not_a_panic() {
        let mut m = without_libraries();
        assert_no_driver(m.host_copy(0, HostDir::H2d, 1 << 20, 1, 2));
        assert_no_driver(m.host_copy(0, HostDir::Bidir, 1 << 20, 1, 2));
        assert_no_driver(m.host_copy_all(HostDir::D2h, 1 << 20, 1, 2));
        assert_no_driver(m.device_copy(0, 1 << 20, 1, 2));
        assert_no_driver(m.p2p_copy(0, 1, P2pMode::Read, 1 << 20, 1, 2));
        assert_no_driver(m.p2p_copy(1, 0, P2pMode::Bidir, 1 << 20, 1, 2));
        assert_no_driver(m.p2p_latency(0, 1, 100));
        assert_no_driver(m.collective(CollectiveOp::AllReduce, 1 << 20, 1, 2));
        assert_no_driver(m.collective(CollectiveOp::AllToAll, 8, 1, 2));
        assert_no_driver(m.collective_no_nvls(CollectiveOp::AllReduce, &[8, 1 << 20], 1, 2));
        let training: TrainingCheck = toml::from_str("").unwrap();
        assert_no_driver(m.training(&training));
        // The same error every time: a missing library does not come back.
        assert_no_driver(m.training(&training));
    }

    #[test]
    fn training_deadlines_allow_for_a_slow_gpu_and_grow_with_the_work() {
        let c: TrainingCheck = toml::from_str("").unwrap();
        let anchor = Model::main(&c, 1).unwrap();
        // 30 steps of ~0.96 TFLOP (20 ms on an H200) get about 150 s.
        let d = training_deadline(&anchor, 30).as_secs_f64();
        assert!((148.0..152.0).contains(&d), "{d}");
        assert!(training_deadline(&anchor, 300) > training_deadline(&anchor, 30));
        let golden = Model::golden(&c).unwrap();
        assert!(training_deadline(&golden, 10) < Duration::from_secs(121));
        let eight = Model::main(&c, 8).unwrap();
        assert!(training_deadline(&eight, 30) > training_deadline(&anchor, 30));
    }

    #[test]
    fn on_this_machine_the_real_probes_give_errors_too() {
        // Only meaningful without a driver (CI); with one, the GPU tests cover it.
        if Lib::Cuda.loadable() {
            return;
        }
        let mut m = CudaMeasurements::new(CudaOptions::default());
        assert_no_driver(m.host_copy(0, HostDir::H2d, 1 << 20, 1, 2));
        assert_no_driver(m.collective(CollectiveOp::Broadcast, 1 << 20, 1, 2));
        assert_no_driver(m.training(&toml::from_str("").unwrap()));
    }

    #[test]
    fn info_lists_libraries_and_nccl_environment_without_a_gpu() {
        let mut info = BackendInfo {
            simulated: false,
            name: "nvml".into(),
            libraries: vec![],
            nccl_version: None,
            nccl_env: vec![],
        };
        let settings = vec![
            NcclSetting::env("NCCL_ALGO", "Ring"),
            NcclSetting {
                name: "NCCL_PROTO".into(),
                value: "Simple".into(),
                from: Some(PathBuf::from("/etc/nccl.conf")),
            },
        ];
        extend_info(&mut info, &settings);
        assert_eq!(info.name, "nvml+cuda");
        assert_eq!(
            info.nccl_env,
            [
                ("NCCL_ALGO".to_string(), "Ring".to_string()),
                (
                    "NCCL_PROTO".to_string(),
                    "Simple (from /etc/nccl.conf)".to_string()
                )
            ],
            "the settings the checks judge under"
        );
        let names: Vec<&str> = info.libraries.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "libcuda.so.1",
                "libnvrtc.so",
                "libcublas.so",
                "libcublasLt.so",
                "libnccl.so.2"
            ]
        );
        if !Lib::Nccl.loadable() {
            assert_eq!(info.nccl_version, None);
        }
    }
}
