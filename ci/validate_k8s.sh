#!/usr/bin/env bash
# The Kubernetes manifests `nodecert fleet k8s` writes, validated offline against the Kubernetes
# schemas (PyPI kubernetes-validate, schemas bundled; there is no API server here), strictly
# (unknown fields rejected). A deliberately broken copy must fail, so the check can fail.
#   bash ci/validate_k8s.sh NODECERT_BINARY
set -euo pipefail
nodecert=$1
cd "$(dirname "$0")/.."
deps=target/pydeps-k8s
if [ ! -d "$deps/kubernetes_validate" ]; then
  for try in 1 2 3; do
    if python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$deps" kubernetes-validate; then break; fi
    echo "pip install failed (try $try), retrying in 10 s"; sleep 10
  done
fi
export PYTHONPATH="$PWD/$deps${PYTHONPATH:+:$PYTHONPATH}"
work=target/k8s-manifests
rm -rf "$work" && mkdir -p "$work"
"$nodecert" fleet k8s h100-sxm-8 --nodes 16 --image registry.example/nodecert:1 --claim results --namespace gpu-acceptance --out "$work/real.json" >/dev/null
"$nodecert" fleet k8s --nodes 4 --image registry.example/nodecert:1 --claim results --simulate h100-sxm-8 --name rehearsal --fabric --out "$work/sim.json" >/dev/null
# kubectl reads the List; the validator has no schema for List, so each item is checked alone.
python3 - "$work" <<'PY'
import json, sys, pathlib
w = pathlib.Path(sys.argv[1])
for f in ("real", "sim"):
    m = json.loads((w / f"{f}.json").read_text())
    kinds = [it["kind"] for it in m["items"]]
    # With --fabric, a Secret holds the job's key between the Service and the Job.
    assert m["kind"] == "List" and kinds == (["Service", "Secret", "Job"] if f == "sim" else ["Service", "Job"]), kinds
    for it in m["items"]:
        (w / f"{f}-{it['kind'].lower()}.json").write_text(json.dumps(it))
sim = json.loads((w / "sim-job.json").read_text())
# The rehearsal measures the fabric: its pods find rank 0 through the headless Service.
pod = sim["spec"]["template"]["spec"]
assert "--fabric" in pod["containers"][0]["args"], pod
assert pod["subdomain"] == "rehearsal", pod
# ... and prove to each other that they belong to the job with the key the Secret holds.
key = json.loads((w / "sim-secret.json").read_text())
assert len(key["stringData"]["key"].strip()) == 64, key
assert {"name": "fabric-key", "secret": {"secretName": "rehearsal-fabric-key", "defaultMode": 256}} in pod["volumes"], pod
env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
assert env["NODECERT_FABRIC_KEY_FILE"] == "/etc/nodecert/fabric/key", env
job = json.loads((w / "real-job.json").read_text())
job["spec"]["completions"] = "sixteen"
(w / "broken-job.json").write_text(json.dumps(job))
PY
python3 -m kubernetes_validate --strict --quiet "$work"/real-*.json "$work"/sim-*.json
if python3 -m kubernetes_validate --strict --quiet "$work/broken-job.json" >/dev/null 2>&1; then
  echo "validate_k8s.sh: a broken Job validated: the check cannot fail" >&2
  exit 1
fi
echo "validate_k8s.sh: the Job, Service and Secret manifests (GPU and simulated) validate against the Kubernetes schemas"
