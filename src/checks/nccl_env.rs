//! NCCL settings (the environment's, NCCL's configuration files') that change what NCCL measures.
//!
//! NCCL takes its tuning from `NCCL_*` variables: `NCCL_P2P_DISABLE=1` sends every byte through
//! host memory, `NCCL_NVLS_ENABLE=0` turns NVLink SHARP off, `NCCL_ALGO`, `NCCL_PROTO` and
//! `NCCL_MAX_NCHANNELS` narrow its choices, `NCCL_IB_DISABLE=1` moves the fabric onto sockets. A
//! shell, a module file or a container image can leave one set, and the figure measured under it
//! is that setting's, not the node's: judged as it is, a healthy node would fail as a slow one.
//!
//! So a check that measures through NCCL records each such setting as a fact ([`record`]), and
//! its evaluation ([`steer`], [`note`]) says so on the certificate. A figure that still meets its floor
//! under the setting holds (NCCL left to itself would not choose slower paths); one that falls
//! short is not judged: an error ("the node could not be tested as asked") that names the
//! setting, never a failure of the hardware. Wrong data stays a failure whatever the settings.
//!
//! A setting that is part of the node as delivered (a VM image's `NCCL_TOPO_FILE`) the suite
//! accepts by name and exact value (`[nccl] accept`): it is recorded as [`ACCEPTED`], and figures
//! measured under it are judged. Across nodes, the settings other nodes ran with are recorded as
//! [`PEERS`] and steer the job's collectives only ([`steer_job`]).

use super::Measured;
use crate::backend::NcclSetting;
use crate::evidence::{Fact, FactValue, Finding, Status, Subject};
use std::collections::BTreeMap;

/// The fact that holds one setting, as "NAME=value".
pub const FACT: &str = "nccl_env";

/// The fact that holds one setting the suite accepts (`[nccl] accept`, [`crate::suite::
/// NcclExpect`]): part of the node as certified, so a figure measured under it is judged.
pub const ACCEPTED: &str = "nccl_env_accepted";

/// The fact that holds a setting other nodes of a job ran with and this one did not, the nodes
/// as its subject ("NAME=value on n3", the fabric check): it steers the figures of the job's
/// collectives, which every node's NCCL ran, and not those this node measured without those
/// nodes. Its value names no node, so it is a condition of this node's figures by value alone
/// ([`crate::diff::CONDITIONS`]).
pub const PEERS: &str = "nccl_env_peers";

/// The name under which a job says that some settings of its nodes were not told (more than it
/// tells): they are unknown, and unknown steers. The same name as a configuration file nodecert
/// could not read: both are unknown settings, and no suite can accept one.
pub const UNTOLD: &str = crate::backend::cuda::UNREAD_CONF;

/// The fact that holds a setting that the reference partners of this node's node-fault verdict
/// ran with and this node did not (the fabric check), the partners as its subject: their pairs
/// with this node ran their NCCL too, so the verdict may be the settings' and not the node's.
pub const PARTNERS: &str = "nccl_env_partners";

/// [`PEERS`] for a setting this node's suite accepts.
pub const PEERS_ACCEPTED: &str = "nccl_env_peers_accepted";

/// The most of one setting's text kept in the evidence.
const MAX_TEXT: usize = 200;

/// Where the figures were measured: within one node, NCCL moves data over NVLink, PCIe and
/// shared memory, and its network settings do not change them; across nodes, they do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Collectives and training within this node.
    Node,
    /// Collectives across nodes (the fabric check).
    Fabric,
}

/// Prefixes of the settings of NCCL's network transports (InfiniBand/RoCE, sockets, plugins,
/// CollNet): they steer the fabric, not the paths within a node.
const NETWORK: &[&str] = &[
    "NCCL_IB_",
    "NCCL_NET",
    "NCCL_CROSS_NIC",
    "NCCL_SOCKET_",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_COLLNET",
    "NCCL_UCX_",
    "NCCL_GDR",
];

/// Variables that say where NCCL logs, where its configuration file is (its settings are read
/// and recorded themselves), or which NCCL a container was built with: none of them changes a
/// figure.
const NEUTRAL: &[&str] = &[
    "NCCL_DEBUG",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_TIMESTAMP_FORMAT",
    "NCCL_DEBUG_TIMESTAMP_LEVELS",
    "NCCL_WARN_ENABLE_DEBUG_INFO",
    "NCCL_SET_THREAD_NAME",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_TOPO_DUMP_FILE_RANK",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_GRAPH_DUMP_FILE_RANK",
    "NCCL_CONF_FILE",
    "NCCL_COMM_ID",
    "NCCL_RAS_ENABLE",
    "NCCL_RAS_ADDR",
    "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT",
    // Set by NVIDIA's container images and by builds: which NCCL, where.
    "NCCL_VERSION",
    "NCCL_HOME",
    "NCCL_ROOT",
    "NCCL_LIB_DIR",
    "NCCL_INCLUDE_DIR",
];

/// Whether `name` set to `value` is an NCCL setting that may change a figure measured in
/// `scope`: every `NCCL_*` variable except the few that only say where NCCL logs or what it was
/// built with, and, within a node, those of its network transports. An unknown one counts: a
/// setting nodecert does not know may still steer NCCL. An empty value is none: NCCL reads it
/// as unset.
pub fn steers(name: &str, value: &str, scope: Scope) -> bool {
    name.starts_with("NCCL_")
        && !value.is_empty()
        && !NEUTRAL.contains(&name)
        && (scope == Scope::Fabric || !NETWORK.iter().any(|p| name.starts_with(p)))
}

/// Whether the suite's `accept` (name = exact value) accepts setting `s`.
fn accepted(s: &NcclSetting, accept: &BTreeMap<String, String>) -> bool {
    // Unknown settings (a file nodecert could not read, settings a job did not tell) never are.
    s.name != UNTOLD && accept.get(&s.name) == Some(&s.value)
}

/// "NAME=value", followed by the file it comes from, cut to [`MAX_TEXT`] bytes.
fn text(s: &NcclSetting) -> String {
    cut(format!("{}={}", s.name, s.shown()))
}

/// The settings of `env` (the NCCL settings in effect, [`crate::backend::Backend::
/// nccl_settings`]) that may change a figure measured in `scope`, whether the suite accepts
/// them or not.
pub fn relevant(env: &[NcclSetting], scope: Scope) -> impl Iterator<Item = &NcclSetting> {
    env.iter().filter(move |s| steers(&s.name, &s.value, scope))
}

/// `text` cut to [`MAX_TEXT`] bytes on a character boundary, "..." saying so. A text already
/// cut is left as it is: what one node cut reads the same on every other.
pub fn cut(mut text: String) -> String {
    let was_cut = text.len() <= MAX_TEXT + 3 && text.ends_with("...");
    if text.len() > MAX_TEXT && !was_cut {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// `s` with its name, value and file each cut to [`MAX_TEXT`] bytes (a setting another node
/// told: what it could send is unbounded).
pub fn bounded(s: &NcclSetting) -> NcclSetting {
    NcclSetting {
        name: cut(s.name.clone()),
        value: cut(s.value.clone()),
        from: s
            .from
            .as_ref()
            .map(|f| cut(f.to_string_lossy().into_owned()).into()),
    }
}

/// Record the settings of `env` that may change a figure measured in `scope`, one fact each:
/// [`FACT`], or [`ACCEPTED`] for those the suite's `accept` names with their value.
pub fn record(
    m: &mut Measured,
    env: &[NcclSetting],
    scope: Scope,
    accept: &BTreeMap<String, String>,
) {
    for s in relevant(env, scope) {
        let name = if accepted(s, accept) { ACCEPTED } else { FACT };
        m.facts
            .push(Fact::new(name, Subject::node(), FactValue::Text(text(s))));
    }
}

/// The most nodes named for one setting that other nodes of a job ran with.
const MAX_NODES_NAMED: usize = 4;

/// "n1, n2, n3, n4 and 3 more".
fn on_list(nodes: &[String]) -> String {
    let mut on = nodes
        .iter()
        .take(MAX_NODES_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if nodes.len() > MAX_NODES_NAMED {
        on.push_str(&format!(" and {} more", nodes.len() - MAX_NODES_NAMED));
    }
    on
}

/// Record the settings that other nodes of a job ran with and this one did not ([`PEERS`], or
/// [`PEERS_ACCEPTED`] where this node's suite accepts it), each with the nodes that had it as
/// its subject. `others` holds each setting with those nodes.
pub fn record_others(
    m: &mut Measured,
    others: &[(NcclSetting, Vec<String>)],
    accept: &BTreeMap<String, String>,
) {
    record_named(m, others, accept, PEERS, Some(PEERS_ACCEPTED));
}

/// Record the settings that the reference partners of this node's node-fault verdict ran with
/// and this node did not ([`PARTNERS`]), those the suite accepts left out.
pub fn record_partners(
    m: &mut Measured,
    others: &[(NcclSetting, Vec<String>)],
    accept: &BTreeMap<String, String>,
) {
    record_named(m, others, accept, PARTNERS, None);
}

fn record_named(
    m: &mut Measured,
    others: &[(NcclSetting, Vec<String>)],
    accept: &BTreeMap<String, String>,
    fact: &str,
    accepted_fact: Option<&str>,
) {
    for (setting, nodes) in others.iter().filter(|(_, n)| !n.is_empty()) {
        let setting = bounded(setting);
        let Some(name) = (if accepted(&setting, accept) {
            accepted_fact
        } else {
            Some(fact)
        }) else {
            continue;
        };
        m.facts.push(Fact::new(
            name,
            Subject::node_named(&on_list(nodes)),
            FactValue::Text(text(&setting)),
        ));
    }
}

/// The settings recorded in `m` that steer its figures, as "NAME=value".
pub fn settings(m: &Measured) -> Vec<&str> {
    texts(m, FACT)
}

/// The settings recorded in `m` that the suite accepts.
pub fn accepted_settings(m: &Measured) -> Vec<&str> {
    texts(m, ACCEPTED)
}

/// The settings other nodes of the job ran with that steer the job's figures, as "NAME=value
/// on n3".
pub fn peer_settings(m: &Measured) -> Vec<String> {
    on_nodes(m, PEERS)
}

/// The settings the reference partners of this node's node-fault verdict ran with, as
/// "NAME=value on n3".
pub fn partner_settings(m: &Measured) -> Vec<String> {
    on_nodes(m, PARTNERS)
}

fn on_nodes(m: &Measured, name: &str) -> Vec<String> {
    m.facts
        .iter()
        .filter(|f| f.name == name)
        .filter_map(|f| match &f.value {
            FactValue::Text(t) => Some(format!(
                "{t} on {}",
                f.subject.node.as_deref().unwrap_or("other nodes")
            )),
            _ => None,
        })
        .collect()
}

/// The facts that leave a shortfall unjudged: this node's settings and other nodes'.
const STEERING: &[&str] = &[FACT, PEERS, PARTNERS];

/// Whether any setting recorded in `m`, this node's or another's, leaves a shortfall unjudged.
pub fn any_steers(m: &Measured) -> bool {
    m.facts.iter().any(|f| STEERING.contains(&f.name.as_str()))
}

/// `m` without the settings that steer its figures: how they would be judged without them.
pub fn without_settings(m: &Measured) -> Measured {
    let mut plain = m.clone();
    plain.facts.retain(|f| !STEERING.contains(&f.name.as_str()));
    plain
}

fn texts<'a>(m: &'a Measured, name: &str) -> Vec<&'a str> {
    m.facts
        .iter()
        .filter(|f| f.name == name)
        .filter_map(|f| match &f.value {
            FactValue::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// Where `m` was measured under NCCL settings of this node, each of `figures` (findings that
/// judge a figure NCCL produced, never its data) that failed becomes an error naming the
/// settings. Nothing changes where no setting was recorded.
pub fn steer<'a>(m: &Measured, figures: impl IntoIterator<Item = &'a mut Finding>) {
    steer_with(&own(m), figures);
}

/// [`steer`] for the figures of a job's collectives across nodes: steered by this node's
/// settings and by those other nodes ran with ([`PEERS`]).
pub fn steer_job<'a>(m: &Measured, figures: impl IntoIterator<Item = &'a mut Finding>) {
    steer_with(&[own(m), peer_settings(m)].concat(), figures);
}

/// [`steer`] for this node's node-fault verdict: steered by this node's settings and by those
/// its reference partners ran with ([`PARTNERS`]).
pub fn steer_fault<'a>(m: &Measured, figures: impl IntoIterator<Item = &'a mut Finding>) {
    steer_with(&[own(m), partner_settings(m)].concat(), figures);
}

fn own(m: &Measured) -> Vec<String> {
    settings(m).into_iter().map(str::to_string).collect()
}

fn steer_with<'a>(set: &[String], figures: impl IntoIterator<Item = &'a mut Finding>) {
    if set.is_empty() {
        return;
    }
    let list = set.join(", ");
    for f in figures.into_iter().filter(|f| f.status == Status::Fail) {
        f.status = Status::Error;
        f.reason = format!(
            "{}; not judged: NCCL ran under {list}, so this figure may be the settings' and \
             not the node's (unset them, or accept them in the suite's [nccl] section, to judge \
             it)",
            f.reason
        );
    }
}

/// One line of information, where `m` was measured under NCCL settings: which, and what they
/// mean for the verdicts on `what` ("all_reduce", "the fabric").
pub fn note(m: &Measured, what: &str) -> Option<Finding> {
    let (own, peers) = (settings(m).join(", "), peer_settings(m).join(", "));
    let partners = partner_settings(m).join(", ");
    let ok = [
        accepted_settings(m)
            .into_iter()
            .map(str::to_string)
            .collect(),
        on_nodes(m, PEERS_ACCEPTED),
    ]
    .concat()
    .join(", ");
    let mut said = Vec::new();
    if !own.is_empty() {
        said.push(format!(
            "{what} measured with {own}: a figure that meets its floor holds, one that does not \
             is not judged"
        ));
    }
    if !peers.is_empty() {
        said.push(format!(
            "the job's collectives ran with {peers} too: a shortfall of the job's figures is not \
             judged"
        ));
    }
    if !partners.is_empty() {
        said.push(format!(
            "the pairs of this node's node-fault verdict ran with {partners}: the verdict is not \
             judged"
        ));
    }
    if !ok.is_empty() {
        said.push(format!(
            "{} {ok}, which the suite accepts as part of the node: figures under them are judged",
            if said.is_empty() {
                format!("{what} measured with")
            } else {
                "with".to_string()
            }
        ));
    }
    if said.is_empty() {
        return None;
    }
    let found = [own, peers, ok]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(", ");
    Some(
        super::judge::finding(
            Status::Pass,
            Subject::node(),
            found,
            "NCCL left to its own choices",
            said.join("; "),
        )
        .on(FACT)
        .informational(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::judge::finding;

    fn env(list: &[(&str, &str)]) -> Vec<NcclSetting> {
        list.iter().map(|(k, v)| NcclSetting::env(k, v)).collect()
    }

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn settings_that_steer_nccl_are_recorded_and_neutral_ones_are_not() {
        let mut m = Measured::default();
        let set = env(&[
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_SOCKET_IFNAME", "eth0"),
            ("NCCL_IB_HCA", "mlx5_0"),
            ("NCCL_VERSION", "2.27.3"),
            ("NCCL_SOME_FUTURE_KNOB", "7"),
            ("NCCL_ALGO", ""),
        ]);
        record(&mut m, &set, Scope::Node, &none());
        assert_eq!(
            settings(&m),
            ["NCCL_P2P_DISABLE=1", "NCCL_SOME_FUTURE_KNOB=7"]
        );
        // Across nodes the network's settings steer the figures too.
        let mut m = Measured::default();
        record(&mut m, &set, Scope::Fabric, &none());
        assert_eq!(
            settings(&m),
            [
                "NCCL_P2P_DISABLE=1",
                "NCCL_SOCKET_IFNAME=eth0",
                "NCCL_IB_HCA=mlx5_0",
                "NCCL_SOME_FUTURE_KNOB=7"
            ]
        );
        for scope in [Scope::Node, Scope::Fabric] {
            assert!(steers("NCCL_NVLS_ENABLE", "0", scope));
            assert!(
                steers("NCCL_HOSTID", "a", scope),
                "which ranks share a host"
            );
            assert!(!steers("NCCL_ALGO", "", scope), "empty is unset to NCCL");
            assert!(!steers("NCCL_DEBUG_SUBSYS", "ALL", scope));
            assert!(
                !steers("NCCL_CONF_FILE", "/x", scope),
                "its settings count themselves"
            );
            assert!(
                !steers("CUDA_VISIBLE_DEVICES", "0", scope),
                "only NCCL's own"
            );
        }
        assert!(!steers("NCCL_NET_GDR_LEVEL", "PHB", Scope::Node));
        assert!(steers("NCCL_NET_GDR_LEVEL", "PHB", Scope::Fabric));
    }

    #[test]
    fn up_to_four_nodes_are_named_and_the_rest_counted() {
        let nodes = |n: usize| (1..=n).map(|i| format!("n{i}")).collect::<Vec<_>>();
        assert_eq!(on_list(&nodes(1)), "n1");
        assert_eq!(on_list(&nodes(4)), "n1, n2, n3, n4");
        assert_eq!(on_list(&nodes(5)), "n1, n2, n3, n4 and 1 more");
    }

    #[test]
    fn a_cut_text_is_not_cut_again_and_a_long_one_always_is() {
        for ch in ["x", "é", "€", "𝄞"] {
            let long = ch.repeat(300);
            let once = cut(long.clone());
            assert!(
                once.len() <= MAX_TEXT + 3 && once.ends_with("..."),
                "{once}"
            );
            assert_eq!(cut(once.clone()), once, "{ch}");
        }
        // Up to three bytes over the bound and ending in "...": already within it, kept.
        for n in 1..=3 {
            let t = format!("{}...", "x".repeat(MAX_TEXT + n - 3));
            assert_eq!(cut(t.clone()), t);
        }
        // Four over, or not ending in "...": cut.
        let t = format!("{}...", "x".repeat(MAX_TEXT + 1));
        assert_eq!(cut(t).len(), MAX_TEXT + 3);
        let t = "x".repeat(MAX_TEXT + 1);
        assert_eq!(cut(t), format!("{}...", "x".repeat(MAX_TEXT)));
    }

    #[test]
    fn a_long_setting_is_cut_on_a_character_boundary() {
        // "NCCL_ALGOS=" is 11 bytes and "é" 2: byte 200 falls inside a character.
        let mut m = Measured::default();
        record(
            &mut m,
            &env(&[("NCCL_ALGOS", &"é".repeat(300))]),
            Scope::Node,
            &none(),
        );
        let s = settings(&m)[0];
        assert_eq!(s.len(), MAX_TEXT - 1 + 3, "cut before the character: {s}");
        assert!(s.starts_with("NCCL_ALGOS=é") && s.ends_with("é..."));
        // At the limit exactly, kept whole.
        let mut m = Measured::default();
        let whole = "x".repeat(MAX_TEXT - "NCCL_ALGO=".len());
        record(&mut m, &env(&[("NCCL_ALGO", &whole)]), Scope::Node, &none());
        assert_eq!(settings(&m)[0], format!("NCCL_ALGO={whole}"));
    }

    fn fig(status: Status) -> Finding {
        finding(
            status,
            Subject::node(),
            "100 GB/s",
            ">= 400 GB/s",
            "busbw below its floor",
        )
    }

    #[test]
    fn a_figure_that_falls_short_under_a_setting_is_an_error_that_names_it() {
        let mut m = Measured::default();
        record(
            &mut m,
            &env(&[("NCCL_NVLS_ENABLE", "0")]),
            Scope::Node,
            &none(),
        );
        let mut figures = vec![fig(Status::Fail), fig(Status::Pass), fig(Status::Warn)];
        steer(&m, &mut figures);
        let note = note(&m, "all_reduce").expect("a line of information");
        assert_eq!(figures[0].status, Status::Error);
        assert!(
            figures[0].reason.starts_with(
                "busbw below its floor; not judged: NCCL ran under NCCL_NVLS_ENABLE=0"
            ),
            "{}",
            figures[0].reason
        );
        // What held under the setting still holds; a warning stays one.
        assert_eq!(figures[1].status, Status::Pass);
        assert_eq!(figures[1].reason, "busbw below its floor");
        assert_eq!(figures[2].status, Status::Warn);
        assert!(note.info && !note.is_judgement());
        assert!(note
            .reason
            .contains("all_reduce measured with NCCL_NVLS_ENABLE=0"));
    }

    #[test]
    fn without_a_setting_nothing_changes() {
        let mut m = Measured::default();
        record(
            &mut m,
            &env(&[("NCCL_DEBUG", "WARN")]),
            Scope::Node,
            &none(),
        );
        let mut figures = vec![fig(Status::Fail)];
        steer(&m, &mut figures);
        assert!(note(&m, "all_reduce").is_none());
        assert_eq!(figures[0].status, Status::Fail);
        assert_eq!(figures[0].reason, "busbw below its floor");
    }

    #[test]
    fn a_setting_the_suite_accepts_is_recorded_as_such_and_steers_nothing() {
        let accept: BTreeMap<String, String> = [
            ("NCCL_TOPO_FILE".to_string(), "/opt/topo.xml".to_string()),
            ("NCCL_ALGO".to_string(), "Tree".to_string()),
        ]
        .into();
        let mut from_file = NcclSetting::env("NCCL_TOPO_FILE", "/opt/topo.xml");
        from_file.from = Some("/etc/nccl.conf".into());
        let mut m = Measured::default();
        record(
            &mut m,
            &[from_file, NcclSetting::env("NCCL_ALGO", "Ring")],
            Scope::Node,
            &accept,
        );
        // The value is matched, not its file; another value of an accepted name steers.
        assert_eq!(settings(&m), ["NCCL_ALGO=Ring"]);
        assert_eq!(
            accepted_settings(&m),
            ["NCCL_TOPO_FILE=/opt/topo.xml (from /etc/nccl.conf)"]
        );
        // The unknown is never accepted, whatever a suite says.
        let unknown: BTreeMap<String, String> = [(UNTOLD.to_string(), "x".to_string())].into();
        let mut m2 = Measured::default();
        record(
            &mut m2,
            &[NcclSetting::env(UNTOLD, "x")],
            Scope::Node,
            &unknown,
        );
        assert_eq!(settings(&m2), ["NCCL_*=x"]);
        let n = note(&m, "all_reduce").unwrap();
        assert_eq!(
            n.reason,
            "all_reduce measured with NCCL_ALGO=Ring: a figure that meets its floor holds, one \
             that does not is not judged; with NCCL_TOPO_FILE=/opt/topo.xml (from \
             /etc/nccl.conf), which the suite accepts as part of the node: figures under them \
             are judged"
        );
        // Only accepted settings: nothing is steered, and the note says they were judged.
        let mut m = Measured::default();
        record(
            &mut m,
            &[NcclSetting::env("NCCL_ALGO", "Tree")],
            Scope::Node,
            &accept,
        );
        let mut figures = vec![fig(Status::Fail)];
        steer(&m, &mut figures);
        assert_eq!(figures[0].status, Status::Fail);
        let n = note(&m, "all_reduce").unwrap();
        assert_eq!(
            n.reason,
            "all_reduce measured with NCCL_ALGO=Tree, which the suite accepts as part of the \
             node: figures under them are judged"
        );
        assert_eq!(n.found, "NCCL_ALGO=Tree");
    }
}
