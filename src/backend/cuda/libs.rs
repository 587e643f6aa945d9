//! Finding the CUDA libraries where users have them, and making cudarc able to load them.
//!
//! cudarc dlopen()s libraries by name (`libnccl.so`, `libnccl.so.12`, ... `libnccl.so.1`), never
//! by NCCL's real soname `libnccl.so.2`, and under our `cuda-12xxx` feature never
//! `libcublas.so.13` or `libnvrtc.so.13`. pip wheels and distribution runtime packages often ship
//! only the versioned soname, so a library can be on the machine and still be invisible to
//! cudarc. This module:
//!
//! 1. searches the usual places for each library ([`SearchInputs::system`]): LD_LIBRARY_PATH,
//!    the ld.so cache (`ldconfig -p`), the system library folders, CUDA toolkits under
//!    /usr/local/cuda*, and Python wheels under `site-packages/nvidia/*/lib`;
//! 2. when a library cudarc cannot load was found under another name, makes a private folder of
//!    symlinks with the names cudarc tries and re-executes the process once with that folder
//!    first on LD_LIBRARY_PATH ([`reexec_if_needed`]); glibc reads LD_LIBRARY_PATH only at
//!    process start, so a re-exec is the only way. The environment variable [`REEXEC_GUARD`]
//!    prevents a loop;
//! 3. says which files were used ([`library_infos`]): the file the dynamic linker actually
//!    mapped (read from /proc/self/maps), with the version taken from its file name.
//!
//! Nothing here needs a GPU; the search is unit-tested with fake library trees.

use crate::backend::LibraryInfo;
use crate::fsio::trust::{euid, safe_parent};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Set in the environment of the re-executed process (to the symlink folder), so that it never
/// re-executes again.
pub const REEXEC_GUARD: &str = "NODECERT_LIBS_REEXEC";

/// A library nodecert loads through cudarc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lib {
    Cuda,
    Nvrtc,
    Cublas,
    /// cuBLAS's matmul library (libcublas needs it too): the fp8 GEMMs.
    CublasLt,
    Nccl,
}

impl Lib {
    pub const ALL: [Lib; 5] = [Lib::Cuda, Lib::Nvrtc, Lib::Cublas, Lib::CublasLt, Lib::Nccl];

    /// The name users know it by (its usual soname).
    pub fn display(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so.1",
            Lib::Nvrtc => "libnvrtc.so",
            Lib::Cublas => "libcublas.so",
            Lib::CublasLt => "libcublasLt.so",
            Lib::Nccl => "libnccl.so.2",
        }
    }

    /// File names of this library are the stem or the stem followed by `.<version>`.
    pub fn stem(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so",
            Lib::Nvrtc => "libnvrtc.so",
            Lib::Cublas => "libcublas.so",
            Lib::CublasLt => "libcublasLt.so",
            Lib::Nccl => "libnccl.so",
        }
    }

    /// The soname preferred when several files exist in one folder.
    fn preferred(self) -> &'static str {
        match self {
            Lib::Cuda => "libcuda.so.1",
            Lib::Nvrtc => "libnvrtc.so.12",
            Lib::Cublas => "libcublas.so.12",
            Lib::CublasLt => "libcublasLt.so.12",
            Lib::Nccl => "libnccl.so.2",
        }
    }

    /// The name cudarc tries first, which is the name of the symlink we make.
    pub fn link_name(self) -> &'static str {
        self.stem()
    }

    /// cudarc's name for it (what `get_lib_name_candidates` expands).
    fn cudarc_name(self) -> &'static str {
        match self {
            Lib::Cuda => "cuda",
            Lib::Nvrtc => "nvrtc",
            Lib::Cublas => "cublas",
            Lib::CublasLt => "cublasLt",
            Lib::Nccl => "nccl",
        }
    }

    /// What cannot run without it.
    pub fn needed_for(self) -> &'static str {
        match self {
            Lib::Cuda => "GPU measurements cannot run",
            Lib::Nvrtc => "GPU kernels cannot be compiled",
            Lib::Cublas => "GEMM and training cannot run",
            Lib::CublasLt => "fp8 GEMMs cannot run",
            Lib::Nccl => "NCCL collectives cannot run",
        }
    }

    /// Whether cudarc can load it by one of the names it tries. Guards every cudarc entry point:
    /// a missing library makes cudarc panic.
    pub fn loadable(self) -> bool {
        // SAFETY: these only dlopen()/dlclose() candidate names; loading a library runs its
        // initialisers, which is what using it would do anyway.
        unsafe {
            match self {
                Lib::Cuda => cudarc::driver::sys::is_culib_present(),
                Lib::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                Lib::Cublas => cudarc::cublas::sys::is_culib_present(),
                Lib::CublasLt => cudarc::cublaslt::sys::is_culib_present(),
                Lib::Nccl => cudarc::nccl::sys::is_culib_present(),
            }
        }
    }

    /// The names cudarc tries, in its order.
    pub fn cudarc_candidates(self) -> Vec<String> {
        let mut v = cudarc::get_lib_name_candidates(self.cudarc_name());
        if self == Lib::Cuda {
            v.extend(cudarc::get_lib_name_candidates("nvcuda"));
        }
        v
    }
}

/// Where to look. Built from the system by [`SearchInputs::system`]; tests build it by hand.
#[derive(Debug, Clone, Default)]
pub struct SearchInputs {
    /// LD_LIBRARY_PATH as set.
    pub ld_library_path: Option<String>,
    /// Output of `ldconfig -p`.
    pub ldconfig: Option<String>,
    /// Further folders, searched in this order after LD_LIBRARY_PATH and the ld.so cache.
    pub dirs: Vec<PathBuf>,
}

/// A library file that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The path as found (may be a symlink).
    pub file: PathBuf,
    /// The file it resolves to.
    pub real: PathBuf,
    /// Version from the file names ("2.28.3" from libnccl.so.2.28.3).
    pub version: Option<String>,
}

/// The outcome of searching for one library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibSearch {
    pub lib: Lib,
    pub found: Option<Found>,
    /// Folders looked in (existing ones), in order; "ld.so cache" stands for the cache.
    pub searched: Vec<String>,
}

impl LibSearch {
    /// "not found (searched: LD_LIBRARY_PATH (unset), ld.so cache, /usr/lib64, ... and 9 more)".
    pub fn searched_summary(&self) -> String {
        const SHOW: usize = 8;
        let mut s = self
            .searched
            .iter()
            .take(SHOW)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if self.searched.len() > SHOW {
            s.push_str(&format!(" and {} more", self.searched.len() - SHOW));
        }
        if s.is_empty() {
            s = "nothing to search".into();
        }
        s
    }
}

/// "2.28.3" from ("libnccl.so.2.28.3", "libnccl.so"); None for the bare stem or other names.
pub fn version_from_file_name(name: &str, stem: &str) -> Option<String> {
    let rest = name.strip_prefix(stem)?.strip_prefix('.')?;
    let ok = !rest.is_empty()
        && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
        && !rest.starts_with('.')
        && !rest.ends_with('.')
        && !rest.contains("..");
    ok.then(|| rest.to_string())
}

/// Whether `name` is a file name of the library (`stem` or `stem.<digits and dots>`).
pub fn is_lib_file_name(name: &str, stem: &str) -> bool {
    name == stem || version_from_file_name(name, stem).is_some()
}

/// Compare dotted versions numerically ("2.28.3" > "2.9.1").
fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// The ld.so cache tag of this machine's architecture in `ldconfig -p` output.
fn arch_tag() -> Option<&'static str> {
    if cfg!(target_arch = "x86_64") {
        Some("x86-64")
    } else if cfg!(target_arch = "aarch64") {
        Some("AArch64")
    } else {
        None
    }
}

/// Entries of `ldconfig -p` output: (file name, path), for this architecture only.
/// A line reads `\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2`.
pub fn parse_ldconfig(text: &str) -> Vec<(String, PathBuf)> {
    parse_ldconfig_for(text, arch_tag())
}

fn parse_ldconfig_for(text: &str, arch: Option<&str>) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        let left = left.trim();
        let (name, flags) = match left.split_once(" (") {
            Some((n, f)) => (n.trim(), f.trim_end_matches(')')),
            None => (left, ""),
        };
        if let Some(a) = arch {
            if !flags.split(',').any(|f| f.trim() == a) {
                continue;
            }
        }
        let path = path.trim();
        if name.is_empty() || !path.starts_with('/') {
            continue;
        }
        out.push((name.to_string(), PathBuf::from(path)));
    }
    out
}

/// The library files in one folder, best first: the preferred soname, then the bare stem, then
/// other versions, highest first. Dangling symlinks are skipped.
fn files_in_dir(dir: &Path, lib: Lib) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_lib_file_name(n, lib.stem()))
        .filter(|n| dir.join(n).exists())
        .collect();
    names.sort_by(|a, b| {
        let rank = |n: &str| {
            if n == lib.preferred() {
                0
            } else if n == lib.stem() {
                1
            } else {
                2
            }
        };
        rank(a).cmp(&rank(b)).then_with(|| {
            let va = version_key(&version_from_file_name(a, lib.stem()).unwrap_or_default());
            let vb = version_key(&version_from_file_name(b, lib.stem()).unwrap_or_default());
            vb.cmp(&va)
        })
    });
    names.into_iter().map(|n| dir.join(n)).collect()
}

fn found(lib: Lib, file: PathBuf) -> Found {
    let real = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
    let v_of = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| version_from_file_name(n, lib.stem()))
    };
    // The resolved file usually carries the full version (libnccl.so.2 -> libnccl.so.2.28.3).
    let version = match (v_of(&real), v_of(&file)) {
        (Some(a), Some(b)) => Some(if a.len() >= b.len() { a } else { b }),
        (a, b) => a.or(b),
    };
    Found {
        file,
        real,
        version,
    }
}

/// The folders of LD_LIBRARY_PATH, in order.
fn ld_dirs(ld_library_path: Option<&str>) -> Vec<PathBuf> {
    ld_library_path
        .unwrap_or("")
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Search for one library: LD_LIBRARY_PATH, then the ld.so cache, then `inputs.dirs`.
pub fn find(lib: Lib, inputs: &SearchInputs) -> LibSearch {
    let mut searched = Vec::new();
    let mut seen = BTreeSet::new();
    let mut try_dir = |dir: &Path, searched: &mut Vec<String>| -> Option<Found> {
        if !seen.insert(dir.to_path_buf()) || !dir.is_dir() {
            return None;
        }
        searched.push(dir.display().to_string());
        files_in_dir(dir, lib)
            .into_iter()
            .next()
            .map(|f| found(lib, f))
    };
    let ld = ld_dirs(inputs.ld_library_path.as_deref());
    if ld.is_empty() {
        searched.push("LD_LIBRARY_PATH (unset)".into());
    }
    for d in &ld {
        if let Some(f) = try_dir(d, &mut searched) {
            return LibSearch {
                lib,
                found: Some(f),
                searched,
            };
        }
    }
    if let Some(text) = &inputs.ldconfig {
        searched.push("ld.so cache".into());
        let mut entries: Vec<(String, PathBuf)> = parse_ldconfig(text)
            .into_iter()
            .filter(|(n, p)| is_lib_file_name(n, lib.stem()) && p.exists())
            .collect();
        entries.sort_by_key(|(n, _)| {
            if n == lib.preferred() {
                0
            } else if n == lib.stem() {
                1
            } else {
                2
            }
        });
        if let Some((_, p)) = entries.into_iter().next() {
            return LibSearch {
                lib,
                found: Some(found(lib, p)),
                searched,
            };
        }
    } else {
        searched.push("ld.so cache (ldconfig -p unavailable)".into());
    }
    for d in &inputs.dirs {
        if let Some(f) = try_dir(d, &mut searched) {
            return LibSearch {
                lib,
                found: Some(f),
                searched,
            };
        }
    }
    LibSearch {
        lib,
        found: None,
        searched,
    }
}

/// Child folders of `parent` whose names start with `prefix`, sorted.
fn subdirs(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return vec![];
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// Library folders inside Python site directories: `nvidia/*/lib` (NVIDIA's wheels) and
/// `torch/lib`.
pub fn wheel_lib_dirs(site_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for s in site_dirs {
        for pkg in subdirs(&s.join("nvidia"), "") {
            out.push(pkg.join("lib"));
        }
        out.push(s.join("torch").join("lib"));
    }
    out
}

/// Run a command with a time limit; its stdout (at most [`crate::process::STDOUT_LIMIT`] bytes)
/// when it succeeded.
fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Option<String> {
    crate::process::run(cmd, Some(limit))
        .ok()
        .filter(|o| o.status.success() && !o.truncated)
        .map(|o| o.stdout)
}

fn ldconfig_text() -> Option<String> {
    ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|c| run_with_timeout(Command::new(c).arg("-p"), Duration::from_secs(5)))
}

/// Site directories reported by python3, when there is one.
fn python_site_dirs() -> Vec<PathBuf> {
    let code = "import site, sys\n\
                dirs = list(getattr(site, 'getsitepackages', lambda: [])())\n\
                dirs.append(site.getusersitepackages())\n\
                print('\\n'.join(d for d in dirs if d))";
    run_with_timeout(
        Command::new("python3").args(["-c", code]),
        Duration::from_secs(5),
    )
    .map(|s| {
        s.lines()
            .filter(|l| l.starts_with('/'))
            .map(PathBuf::from)
            .collect()
    })
    .unwrap_or_default()
}

/// Site directories found without Python, under the usual prefixes.
fn common_site_dirs() -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = vec![
        "/usr/lib".into(),
        "/usr/local/lib".into(),
        "/opt/conda/lib".into(),
    ];
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            bases.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(h) = std::env::var_os("HOME") {
        bases.push(PathBuf::from(h).join(".local/lib"));
    }
    let mut out = Vec::new();
    for b in bases {
        for py in subdirs(&b, "python3") {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    out
}

/// CUDA toolkit library folders: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*.
fn cuda_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v));
        }
    }
    roots.push("/usr/local/cuda".into());
    roots.extend(subdirs(Path::new("/usr/local"), "cuda-"));
    roots.push("/opt/cuda".into());
    let mut out = Vec::new();
    for r in roots {
        out.push(r.join("lib64"));
        for t in subdirs(&r.join("targets"), "") {
            out.push(t.join("lib"));
        }
        out.push(r.join("lib"));
    }
    out
}

impl SearchInputs {
    /// What this machine offers: LD_LIBRARY_PATH, `ldconfig -p`, system, CUDA and Python
    /// folders.
    pub fn system() -> Self {
        let mut dirs: Vec<PathBuf> = [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/lib64",
            "/usr/lib",
            "/usr/lib/x86_64-linux-gnu/nvidia/current",
            "/usr/lib64/nvidia",
            "/usr/lib/wsl/lib",
            "/usr/local/lib",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        dirs.extend(cuda_dirs());
        for var in ["CONDA_PREFIX"] {
            if let Some(v) = std::env::var_os(var) {
                dirs.push(PathBuf::from(v).join("lib"));
            }
        }
        dirs.push("/opt/conda/lib".into());
        let mut sites = python_site_dirs();
        sites.extend(common_site_dirs());
        dirs.extend(wheel_lib_dirs(&sites));
        SearchInputs {
            ld_library_path: std::env::var("LD_LIBRARY_PATH").ok(),
            ldconfig: ldconfig_text(),
            dirs,
        }
    }
}

/// The search results for every library, computed once per process.
pub fn discovery() -> &'static [LibSearch] {
    static D: OnceLock<Vec<LibSearch>> = OnceLock::new();
    D.get_or_init(|| {
        let inputs = SearchInputs::system();
        Lib::ALL.iter().map(|&l| find(l, &inputs)).collect()
    })
}

/// The search result for one library.
pub fn search_of(lib: Lib) -> Option<&'static LibSearch> {
    discovery().iter().find(|s| s.lib == lib)
}

/// The error for a library cudarc cannot load, saying what was searched.
pub fn missing(lib: Lib) -> crate::error::HwError {
    missing_from(lib, search_of(lib))
}

fn missing_from(lib: Lib, s: Option<&LibSearch>) -> crate::error::HwError {
    let detail = match s.and_then(|s| s.found.as_ref().map(|f| (s, f))) {
        Some((_, f)) => match dlopen_error(&f.file) {
            Some(e) => format!(
                "found {} but it could not be loaded ({e}); {}",
                f.file.display(),
                lib.needed_for()
            ),
            // It loads, just not by the names cudarc tries: the links were not made or not used.
            None => format!(
                "found {}, but cudarc loads it only as {} and no link to it by one of those \
                 names is on LD_LIBRARY_PATH (nodecert makes one at start; see any warning \
                 above); {}",
                f.file.display(),
                soname_candidates(lib).join(", "),
                lib.needed_for()
            ),
        },
        None => format!(
            "not found (searched: {}); {}",
            s.map(LibSearch::searched_summary)
                .unwrap_or_else(|| "nothing".into()),
            lib.needed_for()
        ),
    };
    crate::error::HwError::Unavailable {
        what: lib.display().into(),
        detail,
    }
}

/// The names of the form `libX.so[.N]` among those cudarc tries, in its order.
fn soname_candidates(lib: Lib) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for n in lib.cudarc_candidates() {
        if is_lib_file_name(&n, lib.stem()) && !v.contains(&n) {
            v.push(n);
        }
    }
    v
}

/// Why dlopen() refuses a file (a missing dependency, a wrong architecture), if it does.
fn dlopen_error(path: &Path) -> Option<String> {
    // SAFETY: loading runs the library's initialisers, as using it would; the handle is dropped.
    match unsafe { libloading::Library::new(path) } {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// The symlinks needed so that cudarc finds every library that was found but that it cannot
/// load: (link name, target).
pub fn plan_links(
    searches: &[LibSearch],
    loadable: impl Fn(Lib) -> bool,
) -> Vec<(String, PathBuf)> {
    searches
        .iter()
        .filter_map(|s| s.found.as_ref().map(|f| (s.lib, f)))
        .filter(|(lib, _)| !loadable(*lib))
        .map(|(lib, f)| (lib.link_name().to_string(), f.real.clone()))
        .collect()
}

/// Every file of `lib` in the places [`find`] searches, in its order (best first within a
/// folder), each once by resolved path.
pub fn find_all(lib: Lib, inputs: &SearchInputs) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    let mut push = |f: Found| {
        if !out.iter().any(|o| o.real == f.real) {
            out.push(f);
        }
    };
    let mut dirs = ld_dirs(inputs.ld_library_path.as_deref());
    if let Some(text) = &inputs.ldconfig {
        for (n, p) in parse_ldconfig(text) {
            if is_lib_file_name(&n, lib.stem()) && p.exists() {
                push(found(lib, p));
            }
        }
    }
    dirs.extend(inputs.dirs.iter().cloned());
    for d in dirs {
        for f in files_in_dir(&d, lib) {
            push(found(lib, f));
        }
    }
    out
}

/// The CUDA major version of a toolkit library's version ("12" of "12.8.93"); None when the
/// version is unknown or not a number.
fn major_of(version: Option<&str>) -> Option<u32> {
    version?.split('.').next()?.parse().ok()
}

/// Whether a toolkit library (libnvrtc, libcublas) suits the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolkitFit {
    /// Its major version is at most the driver's CUDA major version.
    Fits,
    /// Its version (or the driver's) is not known: nothing to compare.
    Unknown,
    /// It is newer than the driver, and this file (same major as the driver, or the newest
    /// older one) suits it: link it under the name cudarc loads first.
    Use(Found),
    /// It is newer than the driver and nothing on the machine suits the driver.
    TooNew {
        file: PathBuf,
        version: String,
        /// The driver's CUDA version, e.g. 12080 for 12.8 (cuDriverGetVersion).
        driver: u32,
    },
}

/// Compare the library cudarc would load (`used`) with the driver's CUDA version. A CUBIN from
/// NVRTC 13 does not load on a 12.x driver, and cuBLAS 13 needs R580: prefer a matching `.so.12`.
pub fn toolkit_fit(driver: Option<u32>, used: Option<&Found>, candidates: &[Found]) -> ToolkitFit {
    let (Some(driver), Some(used)) = (driver, used) else {
        return ToolkitFit::Unknown;
    };
    let want = driver / 1000;
    let Some(major) = major_of(used.version.as_deref()) else {
        return ToolkitFit::Unknown;
    };
    if major <= want {
        return ToolkitFit::Fits;
    }
    let mut fitting: Vec<&Found> = candidates
        .iter()
        .filter(|c| major_of(c.version.as_deref()).is_some_and(|m| m <= want))
        .collect();
    // The driver's own major first, then the newest older one.
    fitting.sort_by_key(|c| {
        let v = version_key(c.version.as_deref().unwrap_or(""));
        (
            std::cmp::Reverse(v.first() == Some(&(want as u64))),
            std::cmp::Reverse(v),
        )
    });
    match fitting.first() {
        Some(c) => ToolkitFit::Use((*c).clone()),
        None => ToolkitFit::TooNew {
            file: used.real.clone(),
            version: used.version.clone().unwrap_or_default(),
            driver,
        },
    }
}

/// "toolkit newer than driver: ..." for a library that cannot work with this driver.
pub fn too_new_error(lib: Lib, file: &Path, version: &str, driver: u32) -> crate::error::HwError {
    crate::error::HwError::Unavailable {
        what: format!("a {} that suits the driver", lib.display()),
        detail: format!(
            "toolkit newer than driver: {} is CUDA {version}, but the driver supports CUDA \
             {}.{} (cuDriverGetVersion {driver}) and no {}.{} or older was found; install the \
             CUDA {} build of it (for example from the nvidia-*-cu{} wheels) or a newer driver; \
             {}",
            file.display(),
            driver / 1000,
            (driver % 1000) / 10,
            lib.stem(),
            driver / 1000,
            driver / 1000,
            driver / 1000,
            lib.needed_for()
        ),
    }
}

/// The driver's CUDA version (cuDriverGetVersion: 12080 for 12.8), read from libcuda.so.1
/// without initialising CUDA; None when libcuda is absent or does not answer.
pub fn driver_cuda_version() -> Option<u32> {
    static V: OnceLock<Option<u32>> = OnceLock::new();
    *V.get_or_init(|| {
        type GetVersion = unsafe extern "C" fn(*mut std::ffi::c_int) -> std::ffi::c_int;
        // SAFETY: loading libcuda runs its initialisers, as using it would; cuDriverGetVersion
        // only writes an int and needs no cuInit.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").ok()?;
            let f: libloading::Symbol<GetVersion> = lib.get(b"cuDriverGetVersion\0").ok()?;
            let mut v: std::ffi::c_int = 0;
            (f(&mut v) == 0 && v > 0).then_some(v as u32)
        }
    })
}

/// The toolkit libraries whose loaded version is newer than the driver, with what to do.
fn toolkit_fits() -> &'static [(Lib, ToolkitFit)] {
    static F: OnceLock<Vec<(Lib, ToolkitFit)>> = OnceLock::new();
    F.get_or_init(|| {
        let driver = driver_cuda_version();
        let inputs = SearchInputs::system();
        [Lib::Nvrtc, Lib::Cublas, Lib::CublasLt]
            .into_iter()
            .map(|lib| {
                let used = loaded_file(lib).map(|p| found(lib, p));
                let fit = match toolkit_fit(driver, used.as_ref(), &[]) {
                    ToolkitFit::TooNew { .. } => {
                        toolkit_fit(driver, used.as_ref(), &find_all(lib, &inputs))
                    }
                    other => other,
                };
                (lib, fit)
            })
            .collect()
    })
}

/// Before a measurement that needs `lib`: an error when the library cudarc loads is newer than
/// the driver and no suitable one was linked in its place at start.
pub fn toolkit_check(lib: Lib) -> Result<(), crate::error::HwError> {
    match toolkit_fits().iter().find(|(l, _)| *l == lib) {
        Some((
            _,
            ToolkitFit::TooNew {
                file,
                version,
                driver,
            },
        )) => Err(too_new_error(lib, file, version, *driver)),
        // A `Use` still standing means the re-exec did not happen (a warning said why).
        Some((_, ToolkitFit::Use(f))) => {
            let used = loaded_file(lib).unwrap_or_default();
            Err(crate::error::HwError::Unavailable {
                what: format!("a {} that suits the driver", lib.display()),
                detail: format!(
                    "toolkit newer than driver: {} is loaded although {} suits the driver; \
                     put {} first on LD_LIBRARY_PATH",
                    used.display(),
                    f.real.display(),
                    f.real.parent().unwrap_or(Path::new("/")).display()
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The links that make cudarc load a toolkit library matching the driver instead of a newer one.
fn toolkit_links() -> Vec<(String, PathBuf)> {
    toolkit_fits()
        .iter()
        .filter_map(|(lib, fit)| match fit {
            ToolkitFit::Use(f) => Some((lib.link_name().to_string(), f.real.clone())),
            _ => None,
        })
        .collect()
}

/// Whether a folder (its metadata, links not followed) is private to `uid`: a real folder owned by
/// `uid` that nobody else can write to.
fn private_dir(m: &std::fs::Metadata, uid: u32) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    m.file_type().is_dir() && m.uid() == uid && m.permissions().mode() & 0o022 == 0
}

/// Create (or refresh) `dir` holding the symlinks, and only them: links an earlier run made for
/// other libraries are removed, since the folder comes first on LD_LIBRARY_PATH and they would
/// shadow libraries that load as they are. The folder must be ours: a directory, not a symlink,
/// owned by this user and not writable by others, in a parent others cannot replace it in
/// (a process running as root loads what the links point to).
pub fn make_link_dir(dir: &Path, links: &[(String, PathBuf)]) -> std::io::Result<()> {
    make_link_dir_for(dir, links, euid())
}

fn make_link_dir_for(dir: &Path, links: &[(String, PathBuf)], uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !safe_parent(parent, uid) {
        return Err(std::io::Error::other(format!(
            "{} can be written by other users",
            parent.display()
        )));
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // Checked after creating, so that a folder someone else made in between is refused too.
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| private_dir(&m, uid)) {
        return Err(std::io::Error::other(format!(
            "{} exists and is not a private folder of this user",
            dir.display()
        )));
    }
    for lib in Lib::ALL {
        let name = lib.link_name();
        if !links.iter().any(|(n, _)| n == name) {
            match std::fs::remove_file(dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    for (name, target) in links {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(target.as_path()) {
            continue;
        }
        // Replace atomically, so that a concurrent nodecert never sees a missing link.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(())
}

/// The private folder for the symlinks: `$XDG_RUNTIME_DIR/nodecert-libs` when that runtime
/// folder is this user's, else `<temp dir>/nodecert-libs-<uid>`.
pub fn link_dir() -> PathBuf {
    link_dir_from(
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        std::env::temp_dir(),
        euid(),
    )
}

fn link_dir_from(xdg: Option<PathBuf>, tmp: PathBuf, uid: u32) -> PathBuf {
    // `sudo -E` and `su` keep the XDG_RUNTIME_DIR of the user who called them: a folder that user
    // could swap the links in.
    if let Some(x) = xdg {
        if std::fs::metadata(&x).is_ok_and(|m| private_dir(&m, uid)) {
            return x.join("nodecert-libs");
        }
    }
    tmp.join(format!("nodecert-libs-{uid}"))
}

/// What to do about libraries at process start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reexec {
    /// Every library found is loadable (or nothing was found): carry on.
    NotNeeded,
    /// This process is already the re-executed one: carry on, never re-execute twice.
    AlreadyDone,
    /// Re-execute with this LD_LIBRARY_PATH.
    Exec { ld_library_path: String },
}

/// Decide whether to re-execute. `guard` is the value of [`REEXEC_GUARD`]; `link_dir` holds the
/// `links`. The new LD_LIBRARY_PATH is the link folder, then the user's LD_LIBRARY_PATH as it
/// was (a libcuda or libcublas the user chose, in a container for example, keeps winning over
/// anything in a system folder), then the folders of the link targets, so that their own
/// dependencies (libcublasLt next to libcublas, libnvrtc-builtins next to libnvrtc) resolve
/// where the user's path has none.
pub fn decide_reexec(
    guard: Option<&str>,
    links: &[(String, PathBuf)],
    link_dir: &Path,
    ld_library_path: Option<&str>,
) -> Reexec {
    if guard.is_some() {
        return Reexec::AlreadyDone;
    }
    if links.is_empty() {
        return Reexec::NotNeeded;
    }
    let mut parts: Vec<String> = vec![link_dir.display().to_string()];
    let users = ld_library_path
        .unwrap_or("")
        .split(':')
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let targets = links
        .iter()
        .filter_map(|(_, t)| t.parent().map(|d| d.display().to_string()));
    for p in users.chain(targets) {
        if !parts.contains(&p) {
            parts.push(p);
        }
    }
    Reexec::Exec {
        ld_library_path: parts.join(":"),
    }
}

/// At the start of a run on real hardware: when a library was found that cudarc cannot load,
/// make the symlink folder and re-execute this process with it on LD_LIBRARY_PATH. Returns only
/// when no re-exec is needed or possible (a warning is printed when it was needed but failed).
pub fn reexec_if_needed() {
    let guard = std::env::var(REEXEC_GUARD).ok();
    if guard.is_some() {
        return;
    }
    let mut links = plan_links(discovery(), Lib::loadable);
    // A toolkit newer than the driver: link the matching one under the name cudarc tries first.
    for (name, target) in toolkit_links() {
        links.retain(|(n, _)| *n != name);
        links.push((name, target));
    }
    let dir = link_dir();
    let ld = std::env::var("LD_LIBRARY_PATH").ok();
    let Reexec::Exec { ld_library_path } =
        decide_reexec(guard.as_deref(), &links, &dir, ld.as_deref())
    else {
        return;
    };
    if let Err(e) = make_link_dir(&dir, &links) {
        crate::errln!(
            "warning: cannot prepare library links in {}: {e}; continuing without them",
            dir.display()
        );
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            crate::errln!("warning: cannot re-execute to load libraries ({e}); continuing without");
            return;
        }
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    use std::os::unix::process::CommandExt;
    let err = Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env("LD_LIBRARY_PATH", &ld_library_path)
        .env(REEXEC_GUARD, &dir)
        .exec();
    crate::errln!(
        "warning: cannot re-execute {} to load libraries ({err}); continuing without",
        exe.display()
    );
}

/// The path of the mapped file of a library in `/proc/self/maps` text.
pub fn mapped_path(maps: &str, stem: &str) -> Option<PathBuf> {
    maps.lines().find_map(|l| {
        let i = l.find(" /")?;
        let p = l[i + 1..].trim_end().trim_end_matches(" (deleted)");
        let name = Path::new(p).file_name()?.to_str()?;
        is_lib_file_name(name, stem).then(|| PathBuf::from(p))
    })
}

/// The file of library `stem` this process has mapped now, from /proc/self/maps.
pub fn mapped_file(stem: &str) -> Option<PathBuf> {
    crate::platform::hypervisor::system_text(Path::new("/proc/self/maps"))
        .and_then(|m| mapped_path(&m, stem))
}

/// Which file the dynamic linker maps for `lib` when loaded by cudarc's names: load it the way
/// cudarc does, read /proc/self/maps, unload.
fn loaded_file(lib: Lib) -> Option<PathBuf> {
    for name in lib.cudarc_candidates() {
        // SAFETY: as in `dlopen_error`.
        if let Ok(handle) = unsafe { libloading::Library::new(&name) } {
            let file = mapped_file(lib.stem());
            drop(handle);
            return file;
        }
    }
    None
}

/// One entry per library for the evidence: the file used (or found), and its version.
pub fn library_infos() -> Vec<LibraryInfo> {
    Lib::ALL
        .iter()
        .map(|&lib| {
            let (path, version) = match loaded_file(lib) {
                Some(p) => {
                    let real = std::fs::canonicalize(&p).unwrap_or(p);
                    let v = real
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| version_from_file_name(n, lib.stem()));
                    (Some(real.display().to_string()), v)
                }
                None => match search_of(lib).and_then(|s| s.found.as_ref()) {
                    Some(f) => (
                        Some(format!("{} (found, not loadable)", f.real.display())),
                        f.version.clone(),
                    ),
                    None => (None, None),
                },
            };
            LibraryInfo {
                name: lib.display().into(),
                path,
                version,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"\x7fELF fake").unwrap();
    }

    /// A toolkit tree: /usr/local/cuda (13.0, with the unversioned names cudarc tries first)
    /// and /usr/local/cuda-12.8 beside it, as a machine upgraded to CUDA 13 with an R570 driver
    /// has.
    fn two_toolkits(root: &Path) -> (PathBuf, PathBuf) {
        let new = root.join("cuda/lib64");
        let old = root.join("cuda-12.8/lib64");
        touch(&new.join("libnvrtc.so.13.0.88"));
        symlink("libnvrtc.so.13.0.88", new.join("libnvrtc.so.13")).unwrap();
        symlink("libnvrtc.so.13", new.join("libnvrtc.so")).unwrap();
        touch(&old.join("libnvrtc.so.12.8.93"));
        symlink("libnvrtc.so.12.8.93", old.join("libnvrtc.so.12")).unwrap();
        (new, old)
    }

    #[test]
    fn a_toolkit_newer_than_the_driver_is_replaced_by_the_matching_one() {
        let t = tempfile::tempdir().unwrap();
        let (new, old) = two_toolkits(t.path());
        let inputs = SearchInputs {
            ld_library_path: Some(new.display().to_string()),
            ldconfig: None,
            dirs: vec![old.clone(), new.clone()],
        };
        let all = find_all(Lib::Nvrtc, &inputs);
        // Each file once, by resolved path.
        assert_eq!(all.len(), 2, "{all:?}");
        let used = found(Lib::Nvrtc, new.join("libnvrtc.so"));
        assert_eq!(used.version.as_deref(), Some("13.0.88"));
        match toolkit_fit(Some(12080), Some(&used), &all) {
            ToolkitFit::Use(f) => {
                assert_eq!(
                    f.real,
                    std::fs::canonicalize(old.join("libnvrtc.so.12.8.93")).unwrap()
                )
            }
            other => panic!("{other:?}"),
        }
        // A driver of CUDA 13 takes the 13 build as it is.
        assert_eq!(
            toolkit_fit(Some(13000), Some(&used), &all),
            ToolkitFit::Fits
        );
        // Unknown driver or library version: nothing to compare.
        assert_eq!(toolkit_fit(None, Some(&used), &all), ToolkitFit::Unknown);
        let bare = Found {
            file: "/x/libnvrtc.so".into(),
            real: "/x/libnvrtc.so".into(),
            version: None,
        };
        assert_eq!(
            toolkit_fit(Some(12080), Some(&bare), &all),
            ToolkitFit::Unknown
        );
    }

    #[test]
    fn the_drivers_own_major_is_preferred_over_older_ones() {
        let f = |v: &str| Found {
            file: format!("/l/libcublas.so.{v}").into(),
            real: format!("/l/libcublas.so.{v}").into(),
            version: Some(v.into()),
        };
        let used = f("13.1.0");
        let all = vec![f("11.8.0"), f("13.1.0"), f("12.2.1"), f("12.9.1")];
        assert_eq!(
            toolkit_fit(Some(12090), Some(&used), &all),
            ToolkitFit::Use(f("12.9.1"))
        );
        assert_eq!(
            toolkit_fit(Some(11080), Some(&used), &all),
            ToolkitFit::Use(f("11.8.0"))
        );
    }

    #[test]
    fn a_toolkit_newer_than_the_driver_with_nothing_older_says_so() {
        let t = tempfile::tempdir().unwrap();
        let (new, _) = two_toolkits(t.path());
        let used = found(Lib::Nvrtc, new.join("libnvrtc.so"));
        let only_new = vec![used.clone()];
        let fit = toolkit_fit(Some(12040), Some(&used), &only_new);
        let ToolkitFit::TooNew {
            file,
            version,
            driver,
        } = fit
        else {
            panic!("{fit:?}")
        };
        let e = too_new_error(Lib::Nvrtc, &file, &version, driver).to_string();
        assert!(e.contains("toolkit newer than driver"), "{e}");
        assert!(e.contains("libnvrtc.so.13.0.88 is CUDA 13.0.88"), "{e}");
        assert!(
            e.contains("the driver supports CUDA 12.4 (cuDriverGetVersion 12040)"),
            "{e}"
        );
        assert!(e.ends_with("GPU kernels cannot be compiled"), "{e}");
    }

    #[test]
    fn no_driver_here_means_no_version_and_no_panic() {
        // CI has no libcuda: the version is unknown, and the check lets the caller go on to the
        // ordinary "not available" error.
        if !Lib::Cuda.loadable() {
            assert_eq!(driver_cuda_version(), None);
        }
        let _ = toolkit_check(Lib::Nvrtc);
    }

    #[test]
    fn versions_come_from_file_names() {
        assert_eq!(
            version_from_file_name("libnccl.so.2.28.3", "libnccl.so").as_deref(),
            Some("2.28.3")
        );
        assert_eq!(
            version_from_file_name("libcuda.so.580.159.04", "libcuda.so").as_deref(),
            Some("580.159.04")
        );
        assert_eq!(version_from_file_name("libnccl.so", "libnccl.so"), None);
        assert_eq!(
            version_from_file_name("libnccl.so.2.bak", "libnccl.so"),
            None
        );
        assert_eq!(version_from_file_name("libnccl.so.", "libnccl.so"), None);
        assert!(!is_lib_file_name("libcudart.so.12", "libcuda.so"));
        assert!(!is_lib_file_name("libnccl-net.so", "libnccl.so"));
        assert!(is_lib_file_name("libcuda.so.1", "libcuda.so"));
    }

    #[test]
    fn ldconfig_output_is_parsed_for_this_architecture() {
        let text = "\
1234 libs found in cache `/etc/ld.so.cache'
\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1
\tlibcuda.so (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libcuda.so
Cache generated by: ldconfig (GNU libc) stable release version 2.36
";
        let x86 = parse_ldconfig_for(text, Some("x86-64"));
        assert_eq!(
            x86,
            vec![
                (
                    "libnccl.so.2".to_string(),
                    PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")
                ),
                (
                    "libcuda.so.1".to_string(),
                    PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
                ),
            ]
        );
        let arm = parse_ldconfig_for(text, Some("AArch64"));
        assert_eq!(arm.len(), 1);
        assert_eq!(parse_ldconfig_for(text, None).len(), 4);
    }

    #[test]
    fn finds_versioned_nccl_in_a_wheel_and_resolves_its_version() {
        let t = tempfile::tempdir().unwrap();
        let site = t.path().join("site-packages");
        let lib = site.join("nvidia/nccl/lib");
        touch(&lib.join("libnccl.so.2"));
        // Wheels ship only the soname; a second, unrelated package next to it.
        touch(&site.join("nvidia/cublas/lib/libcublas.so.12"));
        touch(&site.join("nvidia/cublas/lib/libcublasLt.so.12"));
        let inputs = SearchInputs {
            ld_library_path: None,
            ldconfig: Some(String::new()),
            dirs: wheel_lib_dirs(std::slice::from_ref(&site)),
        };
        let s = find(Lib::Nccl, &inputs);
        let f = s.found.expect("found");
        assert_eq!(f.file, lib.join("libnccl.so.2"));
        assert_eq!(f.version.as_deref(), Some("2"));
        let c = find(Lib::Cublas, &inputs).found.expect("cublas found");
        assert_eq!(c.file, site.join("nvidia/cublas/lib/libcublas.so.12"));
        assert!(find(Lib::Cuda, &inputs).found.is_none());
    }

    #[test]
    fn symlink_chains_give_the_full_version_and_dangling_links_are_skipped() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("lib");
        touch(&d.join("libnccl.so.2.28.3"));
        symlink("libnccl.so.2.28.3", d.join("libnccl.so.2")).unwrap();
        // A dangling unversioned link (package for development removed).
        symlink("libnccl.so.9.9.9", d.join("libnccl.so")).unwrap();
        let inputs = SearchInputs {
            dirs: vec![d.clone()],
            ..Default::default()
        };
        let f = find(Lib::Nccl, &inputs).found.unwrap();
        assert_eq!(f.file, d.join("libnccl.so.2"));
        assert_eq!(
            f.real,
            std::fs::canonicalize(d.join("libnccl.so.2.28.3")).unwrap()
        );
        assert_eq!(f.version.as_deref(), Some("2.28.3"));
    }

    #[test]
    fn preference_within_a_folder_soname_then_stem_then_highest_version() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().to_path_buf();
        touch(&d.join("libcublas.so.11.4"));
        touch(&d.join("libcublas.so.13.0.1"));
        let inputs = SearchInputs {
            dirs: vec![d.clone()],
            ..Default::default()
        };
        assert_eq!(
            find(Lib::Cublas, &inputs).found.unwrap().file,
            d.join("libcublas.so.13.0.1")
        );
        touch(&d.join("libcublas.so"));
        assert_eq!(
            find(Lib::Cublas, &inputs).found.unwrap().file,
            d.join("libcublas.so")
        );
        touch(&d.join("libcublas.so.12"));
        assert_eq!(
            find(Lib::Cublas, &inputs).found.unwrap().file,
            d.join("libcublas.so.12")
        );
    }

    #[test]
    fn search_order_ld_library_path_then_cache_then_folders() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("ld");
        let b = t.path().join("cache");
        let c = t.path().join("usr");
        touch(&a.join("libnccl.so.2.19.3"));
        touch(&b.join("libnccl.so.2"));
        touch(&c.join("libnccl.so.2"));
        let cache = format!(
            "\tlibnccl.so.2 (libc6,x86-64,AArch64) => {}\n",
            b.join("libnccl.so.2").display()
        );
        let mut inputs = SearchInputs {
            ld_library_path: Some(format!("::{}", a.display())),
            ldconfig: Some(cache),
            dirs: vec![c.clone()],
        };
        assert_eq!(
            find(Lib::Nccl, &inputs).found.unwrap().file,
            a.join("libnccl.so.2.19.3")
        );
        inputs.ld_library_path = None;
        let s = find(Lib::Nccl, &inputs);
        if arch_tag().is_some() {
            assert_eq!(s.found.unwrap().file, b.join("libnccl.so.2"));
        }
        inputs.ldconfig = None;
        let s = find(Lib::Nccl, &inputs);
        assert_eq!(s.found.unwrap().file, c.join("libnccl.so.2"));
    }

    #[test]
    fn a_missing_library_names_what_was_searched() {
        let t = tempfile::tempdir().unwrap();
        let empty = t.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let inputs = SearchInputs {
            ld_library_path: Some(t.path().display().to_string()),
            ldconfig: Some(String::new()),
            dirs: vec![t.path().join("nope"), empty.clone()],
        };
        let s = find(Lib::Nccl, &inputs);
        assert!(s.found.is_none());
        let e = missing_from(Lib::Nccl, Some(&s)).to_string();
        assert!(
            e.starts_with("libnccl.so.2 is not available: not found (searched: "),
            "{e}"
        );
        assert!(e.contains(&t.path().display().to_string()), "{e}");
        assert!(e.contains("ld.so cache"), "{e}");
        assert!(e.contains(&empty.display().to_string()), "{e}");
        assert!(!e.contains("nope"), "only existing folders are listed: {e}");
        assert!(e.ends_with("; NCCL collectives cannot run"), "{e}");
    }

    #[test]
    fn a_found_but_unloadable_library_says_why() {
        let t = tempfile::tempdir().unwrap();
        touch(&t.path().join("libnccl.so.2"));
        let s = find(
            Lib::Nccl,
            &SearchInputs {
                dirs: vec![t.path().to_path_buf()],
                ..Default::default()
            },
        );
        let e = missing_from(Lib::Nccl, Some(&s)).to_string();
        assert!(e.contains("found "), "{e}");
        assert!(e.contains("could not be loaded ("), "{e}");
    }

    #[test]
    fn links_are_planned_only_for_found_libraries_cudarc_cannot_load() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("wheel");
        touch(&d.join("libnccl.so.2.28.3"));
        symlink("libnccl.so.2.28.3", d.join("libnccl.so.2")).unwrap();
        touch(&d.join("libnvrtc.so.13"));
        let inputs = SearchInputs {
            dirs: vec![d.clone()],
            ..Default::default()
        };
        let searches: Vec<LibSearch> = Lib::ALL.iter().map(|&l| find(l, &inputs)).collect();
        // NVRTC loadable already (say libnvrtc.so.12 elsewhere), NCCL not, cuda not found at all.
        let links = plan_links(&searches, |l| l == Lib::Nvrtc);
        let real = std::fs::canonicalize(d.join("libnccl.so.2.28.3")).unwrap();
        assert_eq!(links, vec![("libnccl.so".to_string(), real.clone())]);

        let dir = t.path().join("links");
        make_link_dir(&dir, &links).unwrap();
        assert_eq!(std::fs::read_link(dir.join("libnccl.so")).unwrap(), real);
        // Idempotent, and a stale link is replaced.
        make_link_dir(&dir, &links).unwrap();
        let other = vec![("libnccl.so".to_string(), d.join("libnvrtc.so.13"))];
        make_link_dir(&dir, &other).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("libnccl.so")).unwrap(),
            d.join("libnvrtc.so.13")
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private folder");
    }

    #[test]
    fn a_helper_command_gives_its_stdout_only_when_it_succeeds_in_time() {
        // The bounds themselves are crate::process's, tested there.
        let said = run_with_timeout(
            Command::new("sh").args(["-c", "echo one; echo two"]),
            Duration::from_secs(5),
        );
        assert_eq!(said.as_deref(), Some("one\ntwo\n"));
        assert_eq!(
            run_with_timeout(Command::new("sleep").arg("30"), Duration::from_millis(200)),
            None
        );
        assert_eq!(
            run_with_timeout(&mut Command::new("false"), Duration::from_secs(5)),
            None
        );
    }

    #[test]
    fn a_link_folder_that_is_not_ours_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(make_link_dir(&open, &[]).is_err());
        let target = t.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let sl = t.path().join("sl");
        symlink(&target, &sl).unwrap();
        assert!(make_link_dir(&sl, &[]).is_err());
    }

    #[test]
    fn links_of_earlier_runs_for_other_libraries_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("wheel");
        touch(&d.join("libnccl.so.2"));
        touch(&d.join("libcublas.so.12"));
        let dir = t.path().join("links");
        let nccl = ("libnccl.so".to_string(), d.join("libnccl.so.2"));
        let cublas = ("libcublas.so".to_string(), d.join("libcublas.so.12"));
        make_link_dir(&dir, &[nccl.clone(), cublas.clone()]).unwrap();
        // A later run where NCCL loads as it is: its old link must not shadow that NCCL.
        make_link_dir(&dir, std::slice::from_ref(&cublas)).unwrap();
        assert!(std::fs::symlink_metadata(dir.join("libnccl.so")).is_err());
        assert_eq!(
            std::fs::read_link(dir.join("libcublas.so")).unwrap(),
            cublas.1
        );
        // Files that are not ours to manage stay.
        touch(&dir.join("notes.txt"));
        make_link_dir(&dir, &[]).unwrap();
        assert!(dir.join("notes.txt").exists());
        assert!(std::fs::symlink_metadata(dir.join("libcublas.so")).is_err());
    }

    #[test]
    fn the_link_folder_must_sit_where_others_cannot_replace_it() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let me = euid();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = make_link_dir(&open.join("links"), &[]).unwrap_err();
        assert!(
            e.to_string().contains("can be written by other users"),
            "{e}"
        );
        assert!(!open.join("links").exists(), "nothing made there");
        // Sticky, as /tmp: others cannot rename what we make in it.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        make_link_dir(&open.join("links"), &[]).unwrap();
        // A folder that another user made first (here: ours, seen as another user's) is refused.
        let e = make_link_dir_for(&open.join("links"), &[], me.wrapping_add(1)).unwrap_err();
        assert!(e.to_string().contains("not a private folder"), "{e}");
    }

    #[test]
    fn the_runtime_folder_is_used_only_when_it_is_this_users() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let me = euid();
        let xdg = t.path().join("run-user");
        std::fs::create_dir(&xdg).unwrap();
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
        let tmp = PathBuf::from("/tmp");
        assert_eq!(
            link_dir_from(Some(xdg.clone()), tmp.clone(), me),
            xdg.join("nodecert-libs")
        );
        // Another user's runtime folder (kept by sudo -E or su): the temp folder instead.
        let other = me.wrapping_add(1);
        assert_eq!(
            link_dir_from(Some(xdg.clone()), tmp.clone(), other),
            tmp.join(format!("nodecert-libs-{other}"))
        );
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            link_dir_from(Some(xdg.clone()), tmp.clone(), me),
            tmp.join(format!("nodecert-libs-{me}"))
        );
        assert_eq!(
            link_dir_from(None, tmp.clone(), me),
            tmp.join(format!("nodecert-libs-{me}"))
        );
    }

    #[test]
    fn a_library_that_loads_but_not_by_cudarc_names_says_so() {
        // A real library, loadable by its path: the C library this test runs with, found under
        // NCCL's soname (which cudarc never tries).
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(libc_path) = mapped_path(&maps, "libc.so") else {
            return; // statically linked: nothing to borrow
        };
        let t = tempfile::tempdir().unwrap();
        symlink(&libc_path, t.path().join("libnccl.so.2")).unwrap();
        let s = find(
            Lib::Nccl,
            &SearchInputs {
                dirs: vec![t.path().to_path_buf()],
                ..Default::default()
            },
        );
        let e = missing_from(Lib::Nccl, Some(&s)).to_string();
        assert!(!e.contains("could not be loaded"), "it loads: {e}");
        assert!(
            e.contains("cudarc loads it only as libnccl.so, libnccl.so.12"),
            "{e}"
        );
        assert!(!e.contains("libnccl64"), "{e}");
        assert_eq!(e.matches("libnccl.so.12").count(), 1, "{e}");
        assert!(e.contains("LD_LIBRARY_PATH"), "{e}");
        assert!(e.ends_with("; NCCL collectives cannot run"), "{e}");
    }

    #[test]
    fn reexec_happens_once_and_puts_the_links_first() {
        let links = vec![(
            "libnccl.so".to_string(),
            PathBuf::from("/site/nvidia/nccl/lib/libnccl.so.2"),
        )];
        let dir = Path::new("/run/user/1000/nodecert-libs");
        assert_eq!(decide_reexec(None, &[], dir, Some("/a")), Reexec::NotNeeded);
        assert_eq!(
            decide_reexec(Some("/run/user/1000/nodecert-libs"), &links, dir, None),
            Reexec::AlreadyDone
        );
        // The user's folders keep their order, ahead of the link targets' folders.
        assert_eq!(
            decide_reexec(None, &links, dir, Some("/a::/site/nvidia/nccl/lib")),
            Reexec::Exec {
                ld_library_path: "/run/user/1000/nodecert-libs:/a:/site/nvidia/nccl/lib".into()
            }
        );
        let links = vec![
            (
                "libcublas.so".to_string(),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libcublas.so.12"),
            ),
            (
                "libnccl.so".to_string(),
                PathBuf::from("/site/nvidia/nccl/lib/libnccl.so.2"),
            ),
        ];
        assert_eq!(
            decide_reexec(None, &links, dir, Some("/opt/mycuda/lib64")),
            Reexec::Exec {
                ld_library_path: "/run/user/1000/nodecert-libs:/opt/mycuda/lib64:\
                                  /usr/lib/x86_64-linux-gnu:/site/nvidia/nccl/lib"
                    .into()
            }
        );
        assert_eq!(
            decide_reexec(None, &links, dir, None),
            Reexec::Exec {
                ld_library_path:
                    "/run/user/1000/nodecert-libs:/usr/lib/x86_64-linux-gnu:/site/nvidia/nccl/lib"
                        .into()
            }
        );
    }

    #[test]
    fn mapped_library_paths_are_read_from_proc_maps() {
        let maps = "\
55d0c0a00000-55d0c0a28000 r--p 00000000 08:01 131 /usr/bin/nodecert
7f1a2c000000-7f1a2c200000 r-xp 00000000 08:01 4242 /usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127
7f1a2d000000-7f1a2e000000 r-xp 00000000 08:01 4243 /opt/my libs/libcuda.so.580.159.04
7f1a2f000000-7f1a2f100000 r-xp 00000000 08:01 4244 /tmp/x/libnccl.so.2.28.3 (deleted)
7ffd5c1f0000-7ffd5c211000 rw-p 00000000 00:00 0 [stack]
";
        assert_eq!(
            mapped_path(maps, "libcuda.so"),
            Some(PathBuf::from("/opt/my libs/libcuda.so.580.159.04"))
        );
        assert_eq!(
            mapped_path(maps, "libnccl.so"),
            Some(PathBuf::from("/tmp/x/libnccl.so.2.28.3"))
        );
        assert_eq!(mapped_path(maps, "libcublas.so"), None);
    }

    #[test]
    fn library_infos_never_panic_and_list_every_library() {
        let infos = library_infos();
        assert_eq!(infos.len(), Lib::ALL.len());
        assert_eq!(infos[3].name, "libcublasLt.so");
        assert_eq!(infos[4].name, "libnccl.so.2");
    }
}
