//! Errors and the exit codes they map to.
//!
//! A failed threshold, an invalid suite, a hardware error and a bad signature are different
//! things and get different exit codes: a broken driver must never look like a slow link.

use std::path::PathBuf;

/// Documented exit codes (also printed by `nodecert --help` and listed in README.md).
pub mod exit {
    /// Every check passed (warnings and skips allowed).
    pub const PASS: u8 = 0;
    /// At least one check failed, or reported an error while measuring.
    pub const CHECK_FAILED: u8 = 1;
    /// Invalid input: suite, node description, flags, evidence or report templates.
    pub const INVALID_INPUT: u8 = 2;
    /// The node could not be tested: no driver, no GPU, a hardware or runtime error.
    pub const NODE_UNTESTABLE: u8 = 3;
    /// A signature or digest did not verify.
    pub const VERIFY_FAILED: u8 = 4;
    /// The run did not finish: promised checks never ran (interrupted, or still running). Also
    /// `sign` refusing such a run without `--allow-incomplete`.
    pub const INCOMPLETE: u8 = 5;
    /// Every check was skipped: nothing about the node was judged. Also `sign` refusing such a
    /// run without `--allow-incomplete`.
    pub const NOTHING_JUDGED: u8 = 6;
    /// Partial: every judgement made held, but readings the suite's checks needed were not
    /// available here ("not available here: XID events of GPU 0"), so some were never made.
    pub const PARTIAL: u8 = 7;
    // Precedence when several hold for one run: 3 (a measurement error) over 1 (a failure) over
    // 5 (incomplete: what did run already failed) over 6 (nothing judged) over 7 (partial) over 0.
}

/// A place in a text file: 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Invalid input: the user must change a file or a flag.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{location}: {message}")]
    Located { location: Location, message: String },
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
    /// A message of several lines that nodecert composed itself (what failed, then what to do):
    /// its line breaks are its own, so the console keeps them, while each line is still shown
    /// with control characters escaped ([`Error::console_text`]).
    #[error("{}", .0.join("\n"))]
    Lines(Vec<String>),
}

/// The node (or the library stack on it) could not be tested. Serializable: a child process
/// that measured for nodecert ([`crate::backend::no_nvls`]) sends it back as it is.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HwError {
    /// A library (driver, NVML, NCCL, ...) is absent; `hint` says what to do.
    #[error("{what} is not available: {detail}")]
    Unavailable { what: String, detail: String },
    /// A driver or library call failed.
    #[error("{call} failed: {detail}")]
    Call { call: String, detail: String },
    /// An operation did not finish in time.
    #[error("{what} did not finish within {seconds} s")]
    Timeout { what: String, seconds: f64 },
    /// The node does not support what was asked (not a failure of the node).
    #[error("not available here: {0}")]
    NotSupported(String),
}

/// Top-level error of a command, carrying its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    Hardware(HwError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Pages that could not be rendered from their templates (exit 2: a template, or evidence
    /// too big to render within the templates' fuel, is the input at fault).
    #[error("{0}")]
    Render(String),
    #[error("{0}")]
    Verify(String),
    /// A command refused to go on because of the run's verdict (`sign` of an incomplete run).
    #[error("{message}")]
    Refused { message: String, code: u8 },
}

impl From<HwError> for Error {
    fn from(e: HwError) -> Self {
        Error::Hardware(e)
    }
}

impl Error {
    /// The message for the console: every control character of it escaped (a newline in a path
    /// or a name the operator typed, or one the node reported, becomes `\n`, so it can never
    /// print a line of its own such as "PASS: node passed"); only the line breaks of a message
    /// nodecert composed of several lines ([`InputError::Lines`]) are kept.
    pub fn console_text(&self) -> String {
        use crate::console::visible;
        match self {
            Error::Input(InputError::Lines(lines)) => lines
                .iter()
                .map(|l| visible(l))
                .collect::<Vec<_>>()
                .join("\n"),
            e => visible(&e.to_string()),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Input(_) => exit::INVALID_INPUT,
            Error::Hardware(_) => exit::NODE_UNTESTABLE,
            Error::Render(_) => exit::INVALID_INPUT,
            Error::Write { .. } => exit::NODE_UNTESTABLE,
            Error::Verify(_) => exit::VERIFY_FAILED,
            Error::Refused { code, .. } => *code,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error's message starting in lowercase, as nodecert's messages do.
pub fn lower(e: &dyn std::fmt::Display) -> String {
    let s = e.to_string();
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}
