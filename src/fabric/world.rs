//! Who am I in a multi-node job: this process's rank, the world size, the host of every rank,
//! the scheduler's job id and the job-scoped port of the control channel, read from the
//! variables Slurm, a Kubernetes Indexed Job or the user set.

use serde::{Deserialize, Serialize};

/// The most ranks one job may have (as many names as a Slurm host list may expand to).
pub const MAX_WORLD: usize = 100_000;
/// The first port [`job_port`] hands out.
pub const PORT_BASE: u16 = 29500;
/// How many ports [`job_port`] spreads jobs over: `PORT_BASE..=PORT_BASE + PORT_SPAN - 1`.
pub const PORT_SPAN: u16 = 1000;

/// One process's place in a multi-node job (one process per node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct World {
    /// This process's rank, `0..size`; rank 0 serves the rendezvous.
    pub rank: usize,
    /// How many ranks (nodes) the job has, 1 to [`MAX_WORLD`].
    pub size: usize,
    /// The host name (or address) of each rank, index = rank; `hosts.len() == size`.
    pub hosts: Vec<String>,
    /// The scheduler's job id (Slurm job id, Kubernetes Job name, or the user's own): ranks of
    /// different jobs never talk to each other.
    pub job: String,
    /// The TCP port rank 0 listens on (the same on every rank).
    pub port: u16,
}

impl World {
    /// Read the world from the environment, given as a function (so that tests need no
    /// process environment). In order, the first that is present wins:
    /// - explicit: `NODECERT_RANK`, `NODECERT_WORLD_SIZE`, `NODECERT_HOSTS` (a comma list or a
    ///   Slurm host list), `NODECERT_JOB`;
    /// - Slurm (one task per node): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_STEP_NODELIST` (set
    ///   by srun: the step's nodes) else `SLURM_JOB_NODELIST`, `SLURM_JOB_ID` with
    ///   `SLURM_STEP_ID` when set (the job is then "job.step") (and `SLURMD_NODENAME`, when set,
    ///   must be this rank's host);
    /// - a Kubernetes Indexed Job: `JOB_COMPLETION_INDEX`, `NODECERT_WORLD_SIZE` (else
    ///   `NODECERT_JOB_COMPLETIONS`), `NODECERT_JOB_NAME` (else `NODECERT_JOB`) and
    ///   `NODECERT_SERVICE` (else the job name: `nodecert fleet k8s` names its headless
    ///   Service after the Job); rank i's host is `<job>-<i>.<service>`.
    ///
    /// `NODECERT_FABRIC_PORT` sets the port, else [`job_port`] derives it from the job id.
    /// `Ok(None)` when none of the three is present; an error names the variable at fault.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<World>, String> {
        // An empty variable counts as unset (as `export X=` leaves it).
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let need = |k: &str, why: &str| get(k).ok_or_else(|| format!("{k} is not set ({why})"));
        let (rank, size, hosts, job) = if let Some(r) = get("NODECERT_RANK") {
            let why = "NODECERT_RANK is";
            let size = parse_size("NODECERT_WORLD_SIZE", &need("NODECERT_WORLD_SIZE", why)?)?;
            let rank = parse_rank("NODECERT_RANK", &r, size)?;
            let list = need("NODECERT_HOSTS", why)?;
            let hosts = expand_hosts("NODECERT_HOSTS", &list, size, "NODECERT_WORLD_SIZE")?;
            (rank, size, hosts, need("NODECERT_JOB", why)?)
        } else if let Some(r) = get("SLURM_PROCID") {
            let why = "SLURM_PROCID is";
            let size = parse_size("SLURM_NTASKS", &need("SLURM_NTASKS", why)?)?;
            let rank = parse_rank("SLURM_PROCID", &r, size)?;
            // The step's nodes when srun says (a step may use part of the allocation).
            let (list_var, list) = match get("SLURM_STEP_NODELIST") {
                Some(l) => ("SLURM_STEP_NODELIST", l),
                None => ("SLURM_JOB_NODELIST", need("SLURM_JOB_NODELIST", why)?),
            };
            let hosts = expand_hosts(list_var, &list, size, "SLURM_NTASKS")?;
            if let Some(me) = get("SLURMD_NODENAME") {
                if me.trim() != hosts[rank] {
                    return Err(format!(
                        "SLURM_PROCID {rank} runs on {:?} but {list_var} puts rank {rank} on \
                         {:?}: run one task per node in block order (srun --ntasks-per-node=1)",
                        me.trim(),
                        hosts[rank]
                    ));
                }
            }
            // One job may run several steps at once: each is a world of its own, with its own
            // port, and a rank of one step is refused by another's rendezvous ("4242.1", as
            // Slurm names steps).
            let job = need("SLURM_JOB_ID", why)?;
            let job = match get("SLURM_STEP_ID") {
                Some(step) => format!("{}.{}", job.trim(), step.trim()),
                None => job,
            };
            (rank, size, hosts, job)
        } else if let Some(r) = get("JOB_COMPLETION_INDEX") {
            let (size_var, size_text) =
                match (get("NODECERT_WORLD_SIZE"), get("NODECERT_JOB_COMPLETIONS")) {
                    (Some(v), _) => ("NODECERT_WORLD_SIZE", v),
                    (None, Some(v)) => ("NODECERT_JOB_COMPLETIONS", v),
                    (None, None) => {
                        return Err(
                            "neither NODECERT_WORLD_SIZE nor NODECERT_JOB_COMPLETIONS is set \
                                (JOB_COMPLETION_INDEX is)"
                                .into(),
                        )
                    }
                };
            let size = parse_size(size_var, &size_text)?;
            let rank = parse_rank("JOB_COMPLETION_INDEX", &r, size)?;
            let name = get("NODECERT_JOB_NAME")
                .or_else(|| get("NODECERT_JOB"))
                .ok_or_else(|| {
                    "neither NODECERT_JOB_NAME nor NODECERT_JOB is set (JOB_COMPLETION_INDEX is)"
                        .to_string()
                })?;
            let name = name.trim().to_string();
            check_dns("NODECERT_JOB_NAME", &name)?;
            let service = get("NODECERT_SERVICE").map_or_else(|| name.clone(), |s| s.trim().into());
            check_dns("NODECERT_SERVICE", &service)?;
            let hosts = k8s_hosts(&name, &service, size);
            (rank, size, hosts, name)
        } else {
            return Ok(None);
        };
        let job = job.trim().to_string();
        if job.len() > 256 {
            return Err(format!("job id of {} bytes: at most 256", job.len()));
        }
        let port = match get("NODECERT_FABRIC_PORT") {
            Some(p) => parse_port(&p)?,
            None => job_port(&job),
        };
        Ok(Some(World {
            rank,
            size,
            hosts,
            job,
            port,
        }))
    }

    /// Check that the fields agree: size 1 to [`MAX_WORLD`], rank below size, one host per
    /// rank, a job id. [`crate::fabric::rendezvous`] checks this before it talks.
    pub fn check(&self) -> Result<(), String> {
        if self.size == 0 || self.size > MAX_WORLD {
            return Err(format!(
                "world size {}: use 1 to {MAX_WORLD} ranks",
                self.size
            ));
        }
        if self.rank >= self.size {
            return Err(format!(
                "rank {} is out of range for a world of {}",
                self.rank, self.size
            ));
        }
        if self.hosts.len() != self.size {
            return Err(format!(
                "{} hosts for a world of {}: one host per rank",
                self.hosts.len(),
                self.size
            ));
        }
        if self.job.is_empty() {
            return Err("the job id is empty".into());
        }
        Ok(())
    }

    /// "rank 2 (n3)": a rank with its host, as error messages name it.
    pub fn who(&self, rank: usize) -> String {
        who(&self.hosts, rank)
    }
}

/// "rank 2 (n3)", or "rank 2" when the host is unknown.
pub(crate) fn who(hosts: &[String], rank: usize) -> String {
    match hosts.get(rank) {
        Some(h) => format!("rank {rank} ({h})"),
        None => format!("rank {rank}"),
    }
}

/// The control channel's port for a job: FNV-1a of the job id, folded into
/// `PORT_BASE..PORT_BASE + PORT_SPAN` (29500..=30499). Pure and the same on every rank and
/// every build (unlike std's hasher), so all ranks agree without talking; two jobs on one node
/// collide with probability 1/1000 (then set `NODECERT_FABRIC_PORT`).
pub fn job_port(job: &str) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // The remainder is below PORT_SPAN (1000), so it fits in u16.
    PORT_BASE + (h % u64::from(PORT_SPAN)) as u16
}

/// A non-negative decimal number of at most 9 digits.
fn parse_num(var: &str, text: &str) -> Result<usize, String> {
    let t = text.trim();
    if t.is_empty() || t.len() > 9 || !t.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{var}={:?} is not a number",
            crate::console::visible(text)
        ));
    }
    t.parse::<usize>()
        .map_err(|e| format!("{var}={t:?} is not a number: {e}"))
}

fn parse_size(var: &str, text: &str) -> Result<usize, String> {
    let n = parse_num(var, text)?;
    if n == 0 || n > MAX_WORLD {
        return Err(format!("{var}={n}: use 1 to {MAX_WORLD} ranks"));
    }
    Ok(n)
}

fn parse_rank(var: &str, text: &str, size: usize) -> Result<usize, String> {
    let r = parse_num(var, text)?;
    if r >= size {
        return Err(format!(
            "{var}={r} is out of range for a world of {size} (ranks 0 to {})",
            size - 1
        ));
    }
    Ok(r)
}

fn parse_port(text: &str) -> Result<u16, String> {
    match parse_num("NODECERT_FABRIC_PORT", text)? {
        p @ 1..=65535 => Ok(p as u16),
        p => Err(format!(
            "NODECERT_FABRIC_PORT={p}: use a port from 1 to 65535"
        )),
    }
}

/// Expand a host list that must name exactly `size` hosts.
fn expand_hosts(var: &str, list: &str, size: usize, size_var: &str) -> Result<Vec<String>, String> {
    let hosts = crate::fleet::hostlist::expand(list).map_err(|e| format!("{var}: {e}"))?;
    if hosts.len() != size {
        return Err(format!(
            "{var} names {} hosts but {size_var} is {size}: one rank per host",
            hosts.len()
        ));
    }
    Ok(hosts)
}

/// A DNS label as Kubernetes names Jobs and Services: 1 to 63 of a-z, 0-9 and '-', starting
/// and ending with a letter or digit.
fn check_dns(var: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{var}={:?} is not a DNS label (1 to 63 of a-z, 0-9, '-')",
            crate::console::visible(name)
        ))
    }
}

/// The pod host names of an Indexed Job behind its headless Service: `<job>-<i>.<service>`.
fn k8s_hosts(job: &str, service: &str, size: usize) -> Vec<String> {
    (0..size).map(|i| format!("{job}-{i}.{service}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::env_of as env;

    fn world(pairs: &[(&str, &str)]) -> Result<Option<World>, String> {
        World::from_env(&env(pairs))
    }

    #[test]
    fn nothing_set_is_no_world() {
        assert_eq!(world(&[]), Ok(None));
        assert_eq!(world(&[("SLURM_JOB_ID", "7"), ("HOME", "/root")]), Ok(None));
        assert_eq!(world(&[("NODECERT_RANK", "")]), Ok(None));
    }

    #[test]
    fn slurm_world() {
        let w = world(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_NODELIST", "n[1-4]"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURMD_NODENAME", "n3"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(w.rank, 2);
        assert_eq!(w.size, 4);
        assert_eq!(w.hosts, ["n1", "n2", "n3", "n4"]);
        assert_eq!(w.job, "4242");
        assert_eq!(w.port, job_port("4242"));
        assert_eq!(w.check(), Ok(()));
    }

    #[test]
    fn two_steps_of_one_slurm_job_are_two_worlds() {
        let step = |id: &str| {
            world(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_NODELIST", "n[1-2]"),
                ("SLURM_JOB_ID", "4242"),
                ("SLURM_STEP_ID", id),
            ])
            .unwrap()
            .unwrap()
        };
        let (a, b) = (step("0"), step("1"));
        assert_eq!(a.job, "4242.0");
        assert_eq!(b.job, "4242.1");
        // Their own ports (these two do not collide), and each rendezvous refuses the other's
        // ranks by the job.
        assert_eq!(a.port, job_port("4242.0"));
        assert_ne!(a.port, b.port);
    }

    #[test]
    fn slurm_errors_name_the_variable() {
        let base = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_NODELIST", "n[1-4]"),
            ("SLURM_JOB_ID", "9"),
        ];
        let with = |k: &str, v: &str| {
            let mut e: Vec<(&str, &str)> = base.iter().copied().filter(|(x, _)| *x != k).collect();
            if !v.is_empty() {
                e.push((k, v));
            }
            world(&e).unwrap_err()
        };
        let e = with("SLURM_NTASKS", "3");
        assert!(
            e.contains("SLURM_JOB_NODELIST names 4 hosts") && e.contains("SLURM_NTASKS is 3"),
            "{e}"
        );
        let e = with("SLURM_PROCID", "4");
        assert!(
            e.contains("SLURM_PROCID=4 is out of range for a world of 4"),
            "{e}"
        );
        let e = with("SLURM_PROCID", "x1");
        assert!(e.contains("SLURM_PROCID=\"x1\" is not a number"), "{e}");
        let e = with("SLURM_NTASKS", "0");
        assert!(e.contains("SLURM_NTASKS=0: use 1 to 100000"), "{e}");
        let e = with("SLURM_NTASKS", "100001");
        assert!(e.contains("SLURM_NTASKS=100001"), "{e}");
        let e = with("SLURM_NTASKS", "-4");
        assert!(e.contains("SLURM_NTASKS=\"-4\" is not a number"), "{e}");
        let e = with("SLURM_JOB_NODELIST", "");
        assert!(e.contains("SLURM_JOB_NODELIST is not set"), "{e}");
        let e = with("SLURM_JOB_NODELIST", "n[4-1]");
        assert!(e.starts_with("SLURM_JOB_NODELIST: "), "{e}");
        let e = with("SLURM_JOB_ID", "");
        assert!(e.contains("SLURM_JOB_ID is not set"), "{e}");
        // srun inside a larger allocation: the step's node list counts, not the job's.
        let mut e = base.to_vec();
        e[2] = ("SLURM_JOB_NODELIST", "n[1-8]");
        e.push(("SLURM_STEP_NODELIST", "n[5-8]"));
        let w = world(&e).unwrap().unwrap();
        assert_eq!(w.hosts, ["n5", "n6", "n7", "n8"]);
        e[2] = ("SLURM_JOB_NODELIST", "n[1-8]");
        e.pop();
        assert!(world(&e)
            .unwrap_err()
            .starts_with("SLURM_JOB_NODELIST names 8 hosts"));
        let e = with("SLURMD_NODENAME", "n9");
        assert!(e.contains("SLURM_PROCID 1 runs on \"n9\""), "{e}");
    }

    #[test]
    fn kubernetes_world() {
        let w = world(&[
            ("JOB_COMPLETION_INDEX", "1"),
            ("NODECERT_WORLD_SIZE", "3"),
            ("NODECERT_JOB_NAME", "cert-a"),
            ("NODECERT_SERVICE", "cert-svc"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(w.rank, 1);
        assert_eq!(
            w.hosts,
            [
                "cert-a-0.cert-svc",
                "cert-a-1.cert-svc",
                "cert-a-2.cert-svc"
            ]
        );
        assert_eq!(w.job, "cert-a");
        // What `nodecert fleet k8s` sets today: the Service is named after the Job.
        let w = world(&[
            ("JOB_COMPLETION_INDEX", "0"),
            ("NODECERT_JOB_COMPLETIONS", "2"),
            ("NODECERT_JOB", "cert-b"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(w.hosts, ["cert-b-0.cert-b", "cert-b-1.cert-b"]);
        let e = world(&[("JOB_COMPLETION_INDEX", "0"), ("NODECERT_JOB", "x")]).unwrap_err();
        assert!(e.contains("NODECERT_WORLD_SIZE"), "{e}");
        let e = world(&[("JOB_COMPLETION_INDEX", "0"), ("NODECERT_WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.contains("NODECERT_JOB_NAME"), "{e}");
        let e = world(&[
            ("JOB_COMPLETION_INDEX", "0"),
            ("NODECERT_WORLD_SIZE", "2"),
            ("NODECERT_JOB_NAME", "Bad_Name"),
        ])
        .unwrap_err();
        assert!(
            e.contains("NODECERT_JOB_NAME=\"Bad_Name\" is not a DNS label"),
            "{e}"
        );
        let e = world(&[
            ("JOB_COMPLETION_INDEX", "2"),
            ("NODECERT_WORLD_SIZE", "2"),
            ("NODECERT_JOB_NAME", "a"),
        ])
        .unwrap_err();
        assert!(e.contains("JOB_COMPLETION_INDEX=2 is out of range"), "{e}");
    }

    #[test]
    fn explicit_world_wins_and_takes_lists() {
        let w = world(&[
            ("NODECERT_RANK", "0"),
            ("NODECERT_WORLD_SIZE", "3"),
            ("NODECERT_HOSTS", "a, b,c"),
            ("NODECERT_JOB", "manual-1"),
            ("NODECERT_FABRIC_PORT", "4000"),
            ("SLURM_PROCID", "5"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((w.rank, w.size, w.port), (0, 3, 4000));
        assert_eq!(w.hosts, ["a", "b", "c"]);
        let w = world(&[
            ("NODECERT_RANK", "1"),
            ("NODECERT_WORLD_SIZE", "2"),
            ("NODECERT_HOSTS", "gpu[07-08]"),
            ("NODECERT_JOB", "j"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(w.hosts, ["gpu07", "gpu08"]);
        let base = [
            ("NODECERT_RANK", "1"),
            ("NODECERT_WORLD_SIZE", "2"),
            ("NODECERT_HOSTS", "a,b"),
            ("NODECERT_JOB", "j"),
        ];
        let mut e = base.to_vec();
        e.push(("NODECERT_FABRIC_PORT", "0"));
        assert!(world(&e).unwrap_err().contains("NODECERT_FABRIC_PORT=0"));
        e.pop();
        e.push(("NODECERT_FABRIC_PORT", "70000"));
        assert!(world(&e)
            .unwrap_err()
            .contains("NODECERT_FABRIC_PORT=70000"));
        e.pop();
        e.push(("NODECERT_FABRIC_PORT", "80a"));
        assert!(world(&e)
            .unwrap_err()
            .contains("NODECERT_FABRIC_PORT=\"80a\""));
        let e: Vec<_> = base
            .iter()
            .copied()
            .filter(|(k, _)| *k != "NODECERT_JOB")
            .collect();
        assert!(world(&e).unwrap_err().contains("NODECERT_JOB is not set"));
        let e: Vec<_> = base
            .iter()
            .copied()
            .filter(|(k, _)| *k != "NODECERT_WORLD_SIZE")
            .collect();
        assert!(world(&e)
            .unwrap_err()
            .contains("NODECERT_WORLD_SIZE is not set"));
    }

    #[test]
    fn job_port_is_stable_spread_and_in_range() {
        // Fixed values: every build and every rank must compute the same port.
        assert_eq!(job_port("4242"), job_port("4242"));
        let p = job_port("");
        assert!((PORT_BASE..PORT_BASE + PORT_SPAN).contains(&p));
        let ports: std::collections::BTreeSet<u16> =
            (0..2000).map(|i| job_port(&i.to_string())).collect();
        assert!(ports.iter().all(|p| (29500..=30499).contains(p)));
        // 2000 ids over 1000 ports: a fair hash fills most of them.
        assert!(ports.len() > 800, "{}", ports.len());
        assert_ne!(job_port("1001"), job_port("1002"));
    }

    #[test]
    fn check_rejects_inconsistent_worlds() {
        let w = World {
            rank: 0,
            size: 2,
            hosts: vec!["a".into(), "b".into()],
            job: "j".into(),
            port: 1,
        };
        assert_eq!(w.check(), Ok(()));
        assert!(World {
            rank: 2,
            ..w.clone()
        }
        .check()
        .unwrap_err()
        .contains("rank 2"));
        assert!(World {
            size: 0,
            ..w.clone()
        }
        .check()
        .unwrap_err()
        .contains("world size 0"));
        assert!(World {
            size: 3,
            ..w.clone()
        }
        .check()
        .unwrap_err()
        .contains("2 hosts"));
        assert!(World {
            job: String::new(),
            ..w.clone()
        }
        .check()
        .is_err());
        assert_eq!(w.who(1), "rank 1 (b)");
        assert_eq!(w.who(5), "rank 5");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const VARS: [&str; 14] = [
            "NODECERT_RANK",
            "NODECERT_WORLD_SIZE",
            "NODECERT_HOSTS",
            "NODECERT_JOB",
            "NODECERT_FABRIC_PORT",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_JOB_NODELIST",
            "SLURM_STEP_NODELIST",
            "SLURM_JOB_ID",
            "SLURMD_NODENAME",
            "JOB_COMPLETION_INDEX",
            "NODECERT_JOB_NAME",
            "NODECERT_SERVICE",
        ];

        fn value() -> impl Strategy<Value = Option<String>> {
            proptest::option::of(prop_oneof![
                "[0-9]{1,3}",
                "n\\[[0-9]{1,2}-[0-9]{1,2}\\]",
                "[a-z0-9,\\[\\]-]{0,12}",
                "\\PC{0,12}",
            ])
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn any_environment_is_a_world_or_an_error_never_a_panic(
                values in proptest::collection::vec(value(), VARS.len()),
            ) {
                let env = |k: &str| {
                    VARS.iter().position(|v| *v == k).and_then(|i| values[i].clone())
                };
                if let Ok(Some(w)) = World::from_env(&env) {
                    prop_assert_eq!(w.check(), Ok(()));
                    prop_assert!(w.port > 0);
                }
            }
        }
    }
}
