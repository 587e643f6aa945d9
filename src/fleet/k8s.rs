//! Kubernetes: an Indexed Job with a headless Service (one pod per node, kept apart by
//! anti-affinity, GPUs requested through the NVIDIA device plugin's resource, evidence to a
//! volume), and the taint and label that take a failed node out of service.
//!
//! The manifests are written as JSON (every JSON document is YAML, and `kubectl apply -f`
//! reads either), so that no value from the command line can change their structure.

use super::{FleetReport, NodeVerdict};
use serde_json::{json, Value};

/// The taint a failed node gets: new pods that do not tolerate it are not scheduled there.
pub const TAINT_KEY: &str = "nodecert.io/failed";
/// The label every judged node gets, with its verdict.
pub const LABEL_KEY: &str = "nodecert.io/verdict";

/// What the Job runs.
#[derive(Debug, Clone)]
pub struct Job {
    /// The Job's (and Service's) name: a DNS label.
    pub name: String,
    pub namespace: Option<String>,
    pub nodes: u32,
    /// GPUs per node requested (`nvidia.com/gpu`).
    pub gpus: u32,
    /// The container image holding nodecert.
    pub image: String,
    pub suite: Option<String>,
    /// The PersistentVolumeClaim (ReadWriteMany) the nodes write their folders to.
    pub claim: String,
    /// Rehearse on simulated nodes (no GPUs requested).
    pub simulate: Option<String>,
    /// Measure the fabric across the Job's pods too (`run --fabric`): the ranks find rank 0
    /// through the headless Service (`<job>-0.<job>`).
    pub fabric: bool,
}

/// A DNS-1123 label, as Kubernetes requires of names.
fn check_label(what: &str, v: &str) -> Result<(), String> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {:?}: use 1 to 63 lowercase letters, digits or '-', not at either end",
            crate::console::visible(v)
        ))
    }
}

/// Where a pod finds the job's fabric key: the Secret's one file, mounted read-only.
pub const KEY_DIR: &str = "/etc/nodecert/fabric";

/// The manifests: a `List` of the headless Service and the Indexed Job, and with `fabric` a
/// Secret holding a new job key (which the pods prove to each other they hold: see
/// [`crate::fabric::key`]). The key makes the manifests a secret too: keep them as one.
pub fn manifests(job: &Job) -> Result<Value, String> {
    check_label("--name", &job.name)?;
    if let Some(ns) = &job.namespace {
        check_label("--namespace", ns)?;
    }
    if job.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    if job.image.is_empty()
        || job
            .image
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("--image: an image reference, without spaces".into());
    }
    check_label("--claim", &job.claim)?;
    let mut meta = json!({ "name": job.name, "labels": { "app.kubernetes.io/name": "nodecert", "nodecert.io/job": job.name } });
    if let Some(ns) = &job.namespace {
        meta["namespace"] = json!(ns);
    }
    let mut args: Vec<String> = vec!["run".into()];
    if let Some(s) = &job.suite {
        args.push(s.clone());
    }
    // The pod's folder is named after the node it runs on (NODE_NAME, from the downward API).
    args.extend(["--out".into(), "/results/$(NODE_NAME)".into(), "-q".into()]);
    if job.fabric {
        args.push("--fabric".into());
    }
    if let Some(node) = &job.simulate {
        args.extend([
            "--simulate".into(),
            node.clone(),
            "--node-name".into(),
            "$(NODE_NAME)".into(),
        ]);
    }
    let env_field = |name: &str, path: &str| json!({ "name": name, "valueFrom": { "fieldRef": { "fieldPath": path } } });
    let mut container = json!({
        "name": "nodecert",
        "image": job.image,
        "command": ["nodecert"],
        "args": args,
        "env": [
            env_field("NODE_NAME", "spec.nodeName"),
            env_field("NODECERT_JOB", "metadata.labels['batch.kubernetes.io/job-name']"),
            { "name": "NODECERT_JOB_COMPLETIONS", "value": job.nodes.to_string() },
        ],
        "volumeMounts": [{ "name": "results", "mountPath": "/results" }],
        "securityContext": { "allowPrivilegeEscalation": false },
    });
    if job.simulate.is_none() {
        container["resources"] = json!({ "limits": { "nvidia.com/gpu": job.gpus } });
    }
    let mut volumes =
        vec![json!({ "name": "results", "persistentVolumeClaim": { "claimName": job.claim } })];
    let mut secret = None;
    if job.fabric {
        let name = format!("{}-fabric-key", job.name);
        check_label("the Secret's name", &name)?;
        let mut smeta = meta.clone();
        smeta["name"] = json!(name);
        secret = Some(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": smeta,
            "type": "Opaque",
            "stringData": { "key": crate::fabric::JobKey::generate()? },
        }));
        // Readable by its owner (root, as nodecert runs) alone, as the key reader insists.
        volumes.push(
            json!({ "name": "fabric-key", "secret": { "secretName": name, "defaultMode": 0o400 } }),
        );
        container["volumeMounts"]
            .as_array_mut()
            .expect("built above as an array")
            .push(json!({ "name": "fabric-key", "mountPath": KEY_DIR, "readOnly": true }));
        container["env"]
            .as_array_mut()
            .expect("built above as an array")
            .push(
                json!({ "name": crate::fabric::key::KEY_ENV, "value": format!("{KEY_DIR}/key") }),
            );
    }
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": { "clusterIP": "None", "selector": { "nodecert.io/job": job.name } },
    });
    let jobm = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": job.nodes,
            "parallelism": job.nodes,
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": { "app.kubernetes.io/name": "nodecert", "nodecert.io/job": job.name } },
                "spec": {
                    "subdomain": job.name,
                    "restartPolicy": "Never",
                    "affinity": { "podAntiAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": { "matchLabels": { "nodecert.io/job": job.name } },
                        "topologyKey": "kubernetes.io/hostname",
                    }] } },
                    "tolerations": [{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }],
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    });
    let items: Vec<Value> = [Some(service), secret, Some(jobm)]
        .into_iter()
        .flatten()
        .collect();
    Ok(json!({ "apiVersion": "v1", "kind": "List", "items": items }))
}

/// A check id as a taint's value, which Kubernetes holds to a label value's form (at most 63
/// characters of letters, digits, '-', '_' and '.', a letter or digit at each end): None where
/// the id (read from fleet.json, which anyone may have edited) is not a check id.
fn taint_value(id: &str) -> Option<String> {
    if !crate::evidence::is_check_id(id) {
        return None;
    }
    let v = id.replace('.', "-");
    let v = v.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!v.is_empty() && v.len() <= 63).then(|| v.to_string())
}

/// The kubectl calls that take the fleet's bad nodes out of service (a NoSchedule taint naming
/// the failed check) and label every node with its verdict; a node that now passes loses the
/// taint nodecert gave it.
pub fn drain_plan(r: &FleetReport) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for n in &r.nodes {
        // Only host names reach kubectl ("--all" would taint every node), and only the job's
        // own nodes: a folder any node of the job could put beside theirs names no node to
        // taint or untaint.
        if n.verdict == NodeVerdict::NotTested
            || n.unlisted
            || n.fabric_wide_only
            || crate::commands::check_node_name(&n.name).is_err()
        {
            continue;
        }
        if n.verdict.drains() {
            let what = n
                .failed_checks
                .first()
                .and_then(|c| taint_value(c))
                .unwrap_or_else(|| n.verdict.key().replace('_', "-"));
            out.push(vec![
                "taint".into(),
                "nodes".into(),
                n.name.clone(),
                format!("{TAINT_KEY}={what}:NoSchedule"),
                "--overwrite".into(),
            ]);
        } else if n.verdict <= NodeVerdict::Flagged {
            out.push(vec![
                "taint".into(),
                "nodes".into(),
                n.name.clone(),
                format!("{TAINT_KEY}:NoSchedule-"),
            ]);
        }
        out.push(vec![
            "label".into(),
            "nodes".into(),
            n.name.clone(),
            format!("{LABEL_KEY}={}", n.verdict.key().replace('_', "-")),
            "--overwrite".into(),
        ]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::gather::blank;

    #[test]
    fn a_fabric_job_gets_a_new_key_in_a_secret_its_pods_alone_read() {
        let job = |fabric: bool| Job {
            name: "cert".into(),
            namespace: Some("gpu".into()),
            nodes: 4,
            gpus: 8,
            image: "registry.example/nodecert:1".into(),
            suite: None,
            claim: "results".into(),
            simulate: None,
            fabric,
        };
        let m = manifests(&job(true)).unwrap();
        let kinds: Vec<&str> = m["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["Service", "Secret", "Job"]);
        let secret = &m["items"][1];
        assert_eq!(secret["metadata"]["name"], "cert-fabric-key");
        assert_eq!(secret["metadata"]["namespace"], "gpu");
        let key = secret["stringData"]["key"].as_str().unwrap();
        crate::fabric::JobKey::new(key.as_bytes()).unwrap();
        // A new key each time.
        let again = manifests(&job(true)).unwrap();
        assert_ne!(
            again["items"][1]["stringData"]["key"].as_str().unwrap(),
            key
        );
        let pod = &m["items"][2]["spec"]["template"]["spec"];
        assert_eq!(
            pod["volumes"][1],
            json!({ "name": "fabric-key", "secret": { "secretName": "cert-fabric-key", "defaultMode": 256 } })
        );
        let c = &pod["containers"][0];
        assert!(c["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(&json!({ "name": "fabric-key", "mountPath": KEY_DIR, "readOnly": true })));
        assert!(c["env"].as_array().unwrap().contains(
            &json!({ "name": "NODECERT_FABRIC_KEY_FILE", "value": "/etc/nodecert/fabric/key" })
        ));
        // Without the fabric: no Secret, no key.
        let m = manifests(&job(false)).unwrap();
        assert_eq!(m["items"].as_array().unwrap().len(), 2);
        assert!(!m.to_string().contains("fabric-key"));
    }

    #[test]
    fn only_host_names_are_tainted_and_a_node_that_passes_loses_the_taint() {
        let mut r = crate::fleet::judge::judge(vec![], &[], 10.0);
        for (name, v) in [
            ("n1", NodeVerdict::Fail),
            ("n2", NodeVerdict::Pass),
            ("n3", NodeVerdict::NotTested),
            ("--all", NodeVerdict::Refused),
        ] {
            let mut n = blank(name);
            n.verdict = v;
            if v == NodeVerdict::Fail {
                n.failed_checks = vec!["collective.all_reduce".into()];
            }
            r.nodes.push(n);
        }
        let got: Vec<String> = drain_plan(&r).into_iter().map(|a| a.join(" ")).collect();
        assert_eq!(
            got,
            [
                "taint nodes n1 nodecert.io/failed=collective-all_reduce:NoSchedule --overwrite",
                "label nodes n1 nodecert.io/verdict=fail --overwrite",
                "taint nodes n2 nodecert.io/failed:NoSchedule-",
                "label nodes n2 nodecert.io/verdict=pass --overwrite",
            ]
        );
        // Folders of nodes not in the job's node list are neither tainted nor untainted.
        for n in r
            .nodes
            .iter_mut()
            .filter(|n| ["n1", "n2"].contains(&n.name.as_str()))
        {
            n.unlisted = true;
        }
        assert!(drain_plan(&r).is_empty());
    }

    /// A failed check's id reaches kubectl as a taint value only in a label value's form: an
    /// id edited into fleet.json (a line break, an escape, a space) gives the verdict instead.
    #[test]
    fn a_taint_names_the_check_only_when_its_id_is_a_check_id() {
        let taint = |id: &str| {
            let mut r = crate::fleet::judge::judge(vec![], &[], 10.0);
            let mut n = blank("n1");
            n.verdict = NodeVerdict::Fail;
            n.failed_checks = vec![id.into()];
            r.nodes.push(n);
            drain_plan(&r)[0][3].clone()
        };
        assert_eq!(
            taint("p2p_bandwidth"),
            "nodecert.io/failed=p2p_bandwidth:NoSchedule"
        );
        assert_eq!(
            taint("after-checks"),
            "nodecert.io/failed=after-checks:NoSchedule"
        );
        assert_eq!(taint("-x."), "nodecert.io/failed=x:NoSchedule");
        for bad in [
            "topology\u{1b}[2J\n# H",
            "Topology",
            "a b",
            "",
            "_",
            &"x".repeat(65),
        ] {
            assert_eq!(taint(bad), "nodecert.io/failed=fail:NoSchedule", "{bad:?}");
        }
        assert_eq!(taint(&"x".repeat(64)), "nodecert.io/failed=fail:NoSchedule");
        // A node failed only for the fabric as a whole is neither tainted nor labelled.
        let mut r = crate::fleet::judge::judge(vec![], &[], 10.0);
        let mut n = blank("n1");
        n.verdict = NodeVerdict::Fail;
        n.failed_checks = vec!["fabric".into()];
        n.fabric_wide_only = true;
        r.nodes.push(n);
        assert!(drain_plan(&r).is_empty());
        r.nodes[0].fabric_wide_only = false;
        assert_eq!(drain_plan(&r).len(), 2);
        assert_eq!(
            taint(&"x".repeat(63)),
            format!("nodecert.io/failed={}:NoSchedule", "x".repeat(63))
        );
    }
}
