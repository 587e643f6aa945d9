//! XID errors: from NVML events while nodecert runs, and from the kernel log since boot
//! ("NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.").

use crate::inventory::{normalize_bus_id, Gpu, XidEvent};

/// One XID report before it is attached to a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct XidReport {
    /// Normalised bus id of the GPU ("0000:3b:00.0"), when the source names it so.
    pub bus_id: Option<String>,
    /// UUID of the GPU, when the source names it so.
    pub uuid: Option<String>,
    pub code: u32,
    /// "nvml event" or "kernel log".
    pub source: &'static str,
    /// The line or event as seen.
    pub text: String,
    /// When it was logged, seconds since boot (the kernel log's timestamp); None for NVML
    /// events (seen while nodecert runs) and for log lines without a timestamp.
    pub since_boot_s: Option<f64>,
}

/// The kernel log's "[ 1234.567890]" timestamp at the start of a line: seconds since boot.
fn leading_timestamp(line: &str) -> Option<f64> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (t, _) = rest.split_once(']')?;
    let t: f64 = t.trim().parse().ok()?;
    (t.is_finite() && t >= 0.0).then_some(t)
}

/// The time of the last line of the kernel log `text` that has one: where a later read's new
/// lines begin, in the log's own time.
pub fn last_timestamp(text: &str) -> Option<f64> {
    text.lines()
        .filter_map(leading_timestamp)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
}

/// The XIDs of the kernel log `text` logged after `cursor` (the last time read before; None:
/// the log was not read then, so no line can be told new), and the cursor for the next read.
pub fn logged_after(text: &str, cursor: Option<f64>) -> (Vec<XidReport>, Option<f64>) {
    let new = parse_kernel_log(text)
        .into_iter()
        .filter(|r| matches!((r.since_boot_s, cursor), (Some(t), Some(c)) if t > c))
        .collect();
    let last = match (cursor, last_timestamp(text)) {
        (Some(c), Some(t)) => Some(c.max(t)),
        (c, t) => c.or(t),
    };
    (new, last)
}

/// Seconds since boot now, on the clock the kernel log stamps its lines with (CLOCK_MONOTONIC:
/// both exclude time suspended).
pub fn since_boot_now() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    (unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } == 0)
        .then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

/// Parse one kernel log line; None when it is not an NVRM XID line. The message must begin
/// with the driver's words, after the line's timestamp if it has one: the kernel logs text that
/// users choose inside its own messages (a program's path, as "process 'x' launched '/tmp/NVRM:
/// Xid (...): 79'"), and such a line is not the driver's.
pub fn parse_kernel_line(line: &str) -> Option<XidReport> {
    let body = match line.trim_start().strip_prefix('[') {
        Some(rest) => rest.split_once(']')?.1,
        None => line,
    };
    let at = line.len() - body.trim_start().len();
    let rest = line[at..].strip_prefix("NVRM: Xid (")?;
    let (addr, after) = rest.split_once(')')?;
    // With MIG on, the driver adds the instances: "(PCI:0000:3b:00 GPU-I:05 GPU-CI:02)".
    let addr = addr
        .split_whitespace()
        .next()
        .unwrap_or("")
        .trim_start_matches("PCI:");
    let digits: String = after
        .trim_start_matches(':')
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let code = digits.parse().ok()?;
    // The kernel names domain:bus:device; the GPU is function 0.
    let bus_id = if addr.matches(':').count() == 2 && !addr.contains('.') {
        format!("{addr}.0")
    } else {
        addr.to_string()
    };
    Some(XidReport {
        bus_id: Some(normalize_bus_id(&bus_id)),
        uuid: None,
        code,
        source: "kernel log",
        text: line[at..].trim().to_string(),
        since_boot_s: leading_timestamp(&line[..at]),
    })
}

/// Every XID line of a kernel log text.
pub fn parse_kernel_log(text: &str) -> Vec<XidReport> {
    text.lines().filter_map(parse_kernel_line).collect()
}

/// The age of a report at `now` (seconds since boot): 0 for NVML events, which arrive while
/// nodecert runs; from the timestamp for kernel log lines; None when either is unknown.
fn age_of(r: &XidReport, now: Option<f64>) -> Option<f64> {
    if r.source == "nvml event" {
        return Some(0.0);
    }
    Some((now? - r.since_boot_s?).max(0.0))
}

/// The younger of two ages; unknown counts as youngest (an XID of unknown age is judged).
fn younger(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => None,
    }
}

/// Attach reports to the GPUs they name, one event per (GPU, code, source) with a count and
/// the age of the most recent one at `now` (seconds since boot). Reports that name no GPU of
/// this inventory come back as notes.
pub fn attach(gpus: &mut [Gpu], reports: &[XidReport], now: Option<f64>) -> Vec<String> {
    let mut notes = Vec::new();
    #[allow(clippy::type_complexity)]
    let mut outside: Vec<((Option<&str>, u32, &str), usize, &str)> = Vec::new();
    #[allow(clippy::type_complexity)]
    let mut tally: Vec<(usize, u32, &'static str, usize, &str, Option<f64>)> = Vec::new();
    for r in reports {
        let gpu = gpus.iter().position(|g| {
            r.uuid.as_deref().is_some_and(|u| u == g.uuid)
                || r.bus_id.as_deref().is_some_and(|b| b == g.pci_bus_id)
        });
        let Some(i) = gpu else {
            // One note a GPU, code and source, however many lines (an XID storm on a GPU
            // nodecert does not list would be thousands).
            let key = (r.bus_id.as_deref().or(r.uuid.as_deref()), r.code, r.source);
            match outside.iter_mut().find(|o| o.0 == key) {
                Some(o) => {
                    o.1 += 1;
                    o.2 = &r.text;
                }
                None => outside.push((key, 1, &r.text)),
            }
            continue;
        };
        let age = age_of(r, now);
        match tally
            .iter_mut()
            .find(|t| (t.0, t.1, t.2) == (i, r.code, r.source))
        {
            Some(t) => {
                t.3 += 1;
                t.4 = &r.text;
                t.5 = younger(t.5, age);
            }
            None => tally.push((i, r.code, r.source, 1, &r.text, age)),
        }
    }
    for (i, code, source, n, text, age_s) in tally {
        gpus[i].xids.push(XidEvent {
            code,
            source: source.into(),
            detail: Some(if n == 1 {
                text.to_string()
            } else {
                format!("{n} times; last: {text}")
            }),
            age_s,
        });
    }
    for ((_, code, source), n, text) in outside {
        notes.push(match n {
            1 => format!("xid {code} ({source}) names a GPU outside this inventory: {text}"),
            n => format!(
                "xid {code} ({source}) names a GPU outside this inventory, {n} times; last: {text}"
            ),
        });
    }
    notes
}

/// The kernel log: /dev/kmsg read without blocking, else the output of `dmesg`.
pub fn read_kernel_log() -> Result<String, String> {
    match read_kmsg() {
        Ok(t) => Ok(t),
        Err(kmsg) => read_dmesg().map_err(|dmesg| {
            let restrict = crate::fsio::read::read_to_string(
                std::path::Path::new("/proc/sys/kernel/dmesg_restrict"),
                crate::fsio::read::Kind::System,
            )
            .ok();
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            format!(
                "/dev/kmsg: {kmsg}; dmesg: {dmesg}{}",
                restricted_hint(restrict.as_deref(), root)
            )
        }),
    }
}

/// Why the kernel log may be closed to this process, for the note that says it was not read:
/// `kernel.dmesg_restrict = 1` (Ubuntu's default) keeps it from users without CAP_SYSLOG.
fn restricted_hint(dmesg_restrict: Option<&str>, root: bool) -> &'static str {
    match (dmesg_restrict.map(str::trim), root) {
        (Some("1"), false) => {
            " (kernel.dmesg_restrict = 1: the kernel log is read by root or with CAP_SYSLOG; \
             run nodecert as root, or the XIDs logged before the run are not available here)"
        }
        _ => "",
    }
}

fn read_kmsg() -> Result<String, String> {
    use std::io::{ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .map_err(|e| e.to_string().to_lowercase())?;
    let mut out = String::new();
    let mut buf = vec![0u8; 16 * 1024];
    // One record per read; the bound guards against a log that never drains.
    for _ in 0..1_000_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                push_record(&mut out, &buf[..n]);
                // Drained in halves, so that each byte is moved at most about twice.
                if out.len() > 2 * KMSG_KEPT {
                    keep_newest(&mut out, KMSG_KEPT);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            // EPIPE: records were overwritten while reading; the next read continues.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string().to_lowercase()),
        }
    }
    keep_newest(&mut out, KMSG_KEPT);
    Ok(out)
}

/// The most of the kernel log kept from /dev/kmsg, its newest lines: a log that holds more (a
/// large `log_buf_len`, or a storm of messages refilling it while it is read) is cut at the
/// front, where the oldest lines are, as `dmesg`'s limit keeps no part at all.
const KMSG_KEPT: usize = 16 << 20;

/// Cut `text` to at most `most` bytes, whole lines, keeping the last.
fn keep_newest(text: &mut String, most: usize) {
    if text.len() <= most {
        return;
    }
    let from = text.len() - most;
    // A line break is one byte: the byte after it begins a character.
    let cut = text.as_bytes()[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |i| from + i + 1);
    text.drain(..cut);
}

/// A /dev/kmsg record is "prio,seq,time,flags;message\n" followed by " KEY=value" lines. Only
/// the kernel's own records are kept (facility 0, `prio >> 3`): what a process writes to
/// /dev/kmsg is logged under another facility, and is not the driver's.
fn push_record(out: &mut String, rec: &[u8]) {
    let text = String::from_utf8_lossy(rec);
    let first = text.lines().next().unwrap_or("");
    if let Some((head, msg)) = first.split_once(';') {
        let prio = head.split(',').next().and_then(|p| p.parse::<u32>().ok());
        if prio.is_none_or(|p| p >> 3 != 0) {
            return;
        }
        // "prio,seq,time,flags": time in microseconds since boot, written as dmesg does.
        if let Some(us) = head.split(',').nth(2).and_then(|t| t.parse::<u64>().ok()) {
            out.push_str(&format!("[{:>5}.{:06}] ", us / 1_000_000, us % 1_000_000));
        }
        out.push_str(msg);
        out.push('\n');
    }
}

/// How long `dmesg` may take: it reads a ring buffer of a few MiB at most.
const DMESG_LIMIT_S: u64 = 10;

fn read_dmesg() -> Result<String, String> {
    let o = crate::process::run(
        &mut std::process::Command::new("dmesg"),
        Some(std::time::Duration::from_secs(DMESG_LIMIT_S)),
    )
    .map_err(|e| e.to_string().to_lowercase())?;
    if !o.status.success() {
        return Err(o.why().to_lowercase());
    }
    if o.truncated {
        // The part kept would be the oldest: the latest XIDs, the ones that matter, lost.
        return Err(format!(
            "its output is over {} MiB",
            crate::process::STDOUT_LIMIT >> 20
        ));
    }
    Ok(o.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The XIDs of a later read of the kernel log are those logged after the last line the
    /// read before saw, in the log's own time (never the system clock's, from which it drifts):
    /// none is told twice, none is missed, and without a first read none can be told new.
    #[test]
    fn xids_logged_after_the_last_read_line_are_new_and_told_once() {
        let first =
            "[  100.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n\
                     [  250.500000] some other line\n";
        assert_eq!(last_timestamp(first), Some(250.5));
        let (new, cursor) = logged_after(first, Some(250.5));
        assert!(new.is_empty());
        assert_eq!(cursor, Some(250.5));
        let later = format!(
            "{first}[  250.500000] NVRM: Xid (PCI:0000:18:00): 13, same instant as seen\n\
             [  300.250000] NVRM: Xid (PCI:0000:28:00): 48, pid=2, DBE\n\
             NVRM: Xid (PCI:0000:38:00): 94, no time\n"
        );
        let (new, cursor) = logged_after(&later, Some(250.5));
        assert_eq!(new.iter().map(|r| r.code).collect::<Vec<_>>(), [48]);
        assert_eq!(new[0].bus_id.as_deref(), Some("0000:28:00.0"));
        assert_eq!(cursor, Some(300.25));
        // Read again with nothing new: nothing told; a log that went back keeps the cursor.
        assert!(logged_after(&later, cursor).0.is_empty());
        assert_eq!(logged_after(first, cursor).1, Some(300.25));
        // No first read: nothing is new yet, and the cursor starts here.
        let (new, cursor) = logged_after(&later, None);
        assert!(new.is_empty());
        assert_eq!(cursor, Some(300.25));
    }

    /// A kernel log closed by dmesg_restrict to a user who is not root says so and how to read
    /// it; anything else adds nothing to the reason given.
    #[test]
    fn a_restricted_kernel_log_says_why() {
        assert!(restricted_hint(Some("1\n"), false).contains("CAP_SYSLOG"));
        assert_eq!(restricted_hint(Some("1\n"), true), "");
        assert_eq!(restricted_hint(Some("0\n"), false), "");
        assert_eq!(restricted_hint(None, false), "");
    }

    const LOG: &str = "\
[    0.599639] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04
[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[ 1300.1] NVRM: Xid (PCI:0000:3B:00): 79, pid=1, name=x, GPU has fallen off the bus.
[ 1400.0] NVRM: Xid (PCI:0000:5d:00): 13, pid=4242, name=python3, Graphics SM Warp Exception
[ 1500.0] NVRM: Xid (0000:99:00): 48, pid=1, An uncorrectable double bit error
";

    fn gpu(i: usize, bus: &str) -> Gpu {
        Gpu {
            index: i,
            uuid: format!("GPU-{i}"),
            pci_bus_id: bus.into(),
            ..Default::default()
        }
    }

    #[test]
    fn xid_lines_parse() {
        let r = parse_kernel_log(LOG);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].bus_id.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(r[0].code, 79);
        assert_eq!(r[2].code, 13);
        assert_eq!(r[3].bus_id.as_deref(), Some("0000:99:00.0"));
        assert!(r[0].text.starts_with("NVRM: Xid (PCI:0000:3b:00): 79"));
        assert!(parse_kernel_line("NVRM: Xid (PCI:0000:3b:00): pid=1").is_none());
    }

    #[test]
    fn mig_xid_lines_name_the_gpu() {
        // The driver's format with MIG on: the instances follow the address.
        for line in [
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
            "NVRM: Xid (PCI:0000:3B:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception",
        ] {
            let r = parse_kernel_line(line).expect(line);
            assert_eq!(r.bus_id.as_deref(), Some("0000:3b:00.0"), "{line}");
        }
        let mut gpus = vec![gpu(0, "0000:3b:00.0")];
        let r = parse_kernel_log("[ 9.0] NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid=1, x\n");
        assert!(attach(&mut gpus, &r, None).is_empty());
        assert_eq!(gpus[0].xids[0].code, 94);
    }

    #[test]
    fn xids_attach_by_bus_id_and_uuid() {
        let mut gpus = vec![gpu(0, "0000:3b:00.0"), gpu(1, "0000:5d:00.0")];
        let mut reports = parse_kernel_log(LOG);
        reports.push(XidReport {
            bus_id: None,
            uuid: Some("GPU-1".into()),
            code: 94,
            source: "nvml event",
            text: "nvml event: xid 94".into(),
            since_boot_s: None,
        });
        let notes = attach(&mut gpus, &reports, Some(2000.0));
        assert_eq!(gpus[0].xids.len(), 1);
        assert_eq!(gpus[0].xids[0].code, 79);
        assert!(gpus[0].xids[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("2 times; last:")));
        let codes: Vec<u32> = gpus[1].xids.iter().map(|x| x.code).collect();
        assert_eq!(codes, vec![13, 94]);
        assert_eq!(gpus[1].xids[1].source, "nvml event");
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("xid 48 (kernel log) names a GPU outside this inventory"));
    }

    #[test]
    fn xids_carry_the_age_of_their_latest_line() {
        let r = parse_kernel_log(LOG);
        assert_eq!(r[0].since_boot_s, Some(1234.5));
        assert_eq!(r[1].since_boot_s, Some(1300.1));
        assert_eq!(
            parse_kernel_line("NVRM: Xid (PCI:0000:3b:00): 79, x")
                .unwrap()
                .since_boot_s,
            None
        );
        let mut gpus = vec![gpu(0, "0000:3b:00.0"), gpu(1, "0000:5d:00.0")];
        attach(&mut gpus, &r, Some(1500.0));
        // Two XID 79 lines on GPU 0: the age of the later one (1300.1 s since boot).
        let age = gpus[0].xids[0].age_s.unwrap();
        assert!((age - 199.9).abs() < 1e-6, "{age}");
        assert!((gpus[1].xids[0].age_s.unwrap() - 100.0).abs() < 1e-6);
        // Without a clock, or a timestamp, the age is unknown; NVML events are from this run.
        let mut gpus = vec![gpu(0, "0000:3b:00.0")];
        attach(&mut gpus, &r[..1], None);
        assert_eq!(gpus[0].xids[0].age_s, None);
        let nvml = XidReport {
            bus_id: Some("0000:3b:00.0".into()),
            uuid: None,
            code: 79,
            source: "nvml event",
            text: "nvml critical xid event 79".into(),
            since_boot_s: None,
        };
        let mut gpus = vec![gpu(0, "0000:3b:00.0")];
        attach(&mut gpus, &[r[0].clone(), nvml], Some(99_999.0));
        assert_eq!(gpus[0].xids[1].age_s, Some(0.0));
        assert!(since_boot_now().is_some_and(|t| t > 0.0));
    }

    /// Only a message that begins with the driver's words is an XID: the kernel logs text that
    /// users choose inside its own messages, and /dev/kmsg records a process wrote are not
    /// the kernel's.
    #[test]
    fn an_xid_is_the_drivers_message_not_text_quoted_in_another() {
        for line in [
            "[ 12.5] process 'x' launched '/tmp/NVRM: Xid (PCI:0000:3b:00): 79, pid=1' with NULL argv",
            "audit: NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            "[ 12.5] audit: NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            "[ 12.5 NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
        ] {
            assert!(parse_kernel_line(line).is_none(), "{line}");
        }
        for line in [
            "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            "[12.5]NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            "  NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
        ] {
            let r = parse_kernel_line(line).expect(line);
            assert_eq!((r.code, r.since_boot_s.is_some()), (79, line.contains('[')));
        }
        // A record a process wrote to /dev/kmsg (facility user, 1: prio 14) is not kept; the
        // kernel's (facility 0: prio 0 to 7) is.
        let mut out = String::new();
        push_record(
            &mut out,
            b"14,1,5,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n",
        );
        push_record(&mut out, b"x,1,5,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n");
        assert_eq!(out, "");
        push_record(&mut out, b"3,1,5,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n");
        assert_eq!(parse_kernel_log(&out).len(), 1);
    }

    /// XIDs on GPUs outside the inventory make one note a GPU, code and source, with a count.
    #[test]
    fn xids_outside_the_inventory_are_counted_not_listed() {
        let line = |bus: &str, code: u32| {
            format!("[ 1.0] NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=1, x\n")
        };
        let mut log = String::new();
        for _ in 0..1000 {
            log.push_str(&line("aa", 13));
            log.push_str(&line("bb", 13));
        }
        log.push_str(&line("aa", 31));
        let mut gpus = vec![gpu(0, "0000:3b:00.0")];
        let notes = attach(&mut gpus, &parse_kernel_log(&log), None);
        assert_eq!(notes.len(), 3, "{notes:#?}");
        assert!(
            notes[0].starts_with(
                "xid 13 (kernel log) names a GPU outside this inventory, 1000 times; last: NVRM: \
                 Xid (PCI:0000:aa:00)"
            ),
            "{}",
            notes[0]
        );
        assert_eq!(
            notes[2],
            "xid 31 (kernel log) names a GPU outside this inventory: NVRM: Xid (PCI:0000:aa:00): \
             31, pid=1, x"
        );
    }

    /// The kernel log kept is its newest whole lines, at most the bound.
    #[test]
    fn the_newest_lines_of_a_long_log_are_kept() {
        let mut t = "é first\nsecond\nthird\n".to_string();
        keep_newest(&mut t, 100);
        assert_eq!(t, "é first\nsecond\nthird\n");
        keep_newest(&mut t, 13);
        assert_eq!(t, "third\n");
        let mut t = "éééé".to_string();
        keep_newest(&mut t, 3);
        assert_eq!(t, "");
        // A kernel log of the usual size (a ring buffer of a few MiB) is kept whole.
        let line = "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, x\n";
        let log = line.repeat((4 << 20) / line.len());
        let mut t = log.clone();
        keep_newest(&mut t, KMSG_KEPT);
        assert_eq!(t.len(), log.len());
    }

    #[test]
    fn kmsg_records_keep_the_message() {
        let mut out = String::new();
        push_record(
            &mut out,
            b"4,1234,5678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n SUBSYSTEM=pci\n",
        );
        assert_eq!(
            out,
            "[    0.005678] NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n"
        );
        let r = parse_kernel_log(&out);
        assert_eq!(r[0].since_boot_s, Some(0.005678));
    }

    #[test]
    fn reading_the_kernel_log_does_not_block_or_panic() {
        let _ = read_kernel_log();
    }
}
