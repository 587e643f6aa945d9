#!/usr/bin/env bash
# GPU smoke test of the real measurements (issue 4), for a session that has the lent H200.
#
# 1. Here, on the CPU machine:      ci/gpu-smoke-measure.sh prepare
#    builds the release binary and copies it and shared/bench/torch_anchor.py into .gpu/
#    (ignored by git; the device tool carries it when named in `carry`).
# 2. On the GPU machine, one call:  run tool, carry [".gpu"], timeout_s 600, command
#                                   bash ci/gpu-smoke-measure.sh run
#    runs nodecert's training step alone (suites/training-anchor.toml: the anchor's MLP
#    1024-4096-4096-10, batch 8192, fp32 with TF32 off, one GPU), then `nodecert run h200-vm-1`,
#    then PyTorch's anchor in the same call, and prints nodecert's H2D, D2H and device-copy
#    bandwidth against PyTorch's (goal: ratio >= 0.98), nodecert's median training step time
#    against PyTorch's mlp_train_step_ms_fp32 (goal: ratio <= 1.1), the training check's
#    findings (golden trajectory, identical replicas) and the whole-suite wall time
#    (goal: < 60 s). Logs, evidence and reports go to $OUT.
#    Exit status: 0 when every goal is met, 1 otherwise, 2 when something could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=.gpu

prepare() {
    local shared=${SHARED_DIR:-../shared}
    cargo build --release
    mkdir -p "$DIR"
    cp target/release/nodecert "$DIR/nodecert"
    cp "$shared/bench/torch_anchor.py" "$DIR/torch_anchor.py"
    echo "prepared $DIR: $(find "$DIR" -maxdepth 1 -type f -printf '%f ')"
    echo "next: run tool with carry [\"$DIR\"] and command: bash ci/gpu-smoke-measure.sh run"
}

run() {
    local out=${OUT:-$DIR/out}
    for f in nodecert torch_anchor.py; do
        if [ ! -e "$DIR/$f" ]; then
            echo "missing $DIR/$f: run 'ci/gpu-smoke-measure.sh prepare' on the CPU machine first"
            exit 2
        fi
    done
    mkdir -p "$out"
    chmod +x "$DIR/nodecert"
    {
        nvidia-smi -L || true
        nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,temperature.gpu \
            --format=csv || true
    } >"$out/gpu.txt" 2>&1
    cat "$out/gpu.txt"
    "$DIR/nodecert" inventory >"$out/inventory.txt" 2>&1 || true

    # A hung measurement must not eat the device time: every measurement gets 120 s at most,
    # the training run alone 200 s, the whole suite 300 s.
    local trc=0
    NODECERT_CUDA_TIMEOUT_S=120 timeout 200 "$DIR/nodecert" run suites/training-anchor.toml \
        --out "$out/train" >"$out/train.log" 2>&1 || trc=$?
    echo "--- nodecert run suites/training-anchor.toml: exit $trc (last lines of $out/train.log)"
    tail -n 20 "$out/train.log"

    local t0 t1 rc=0
    t0=$(date +%s.%N)
    NODECERT_CUDA_TIMEOUT_S=120 NCCL_DEBUG=WARN \
        timeout 300 "$DIR/nodecert" run h200-vm-1 --out "$out/report" \
        >"$out/nodecert.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    echo "--- nodecert run h200-vm-1: exit $rc (last lines of $out/nodecert.log)"
    tail -n 40 "$out/nodecert.log"

    echo "--- PyTorch anchor"
    if ! timeout 300 python3 "$DIR/torch_anchor.py" >"$out/torch.json" 2>"$out/torch.err"; then
        echo "torch_anchor.py failed:"
        tail -n 20 "$out/torch.err"
    fi

    python3 - "$out/report/evidence.json" "$out/torch.json" "$t0" "$t1" "$rc" \
        "$out/train/evidence.json" "$trc" <<'PY'
import json
import sys

evidence_path, torch_path, t0, t1, rc, train_path, trc = sys.argv[1:8]
wall = float(t1) - float(t0)
try:
    with open(evidence_path) as f:
        ev = json.load(f)
except (OSError, ValueError) as e:
    print(f"no evidence ({e}); nodecert exit {rc}")
    sys.exit(2)
try:
    with open(torch_path) as f:
        torch = json.load(f)
except (OSError, ValueError) as e:
    print(f"no PyTorch figures ({e})")
    torch = {}

print("--- checks")
for c in ev.get("checks", []):
    print(f"{c.get('status', '?'):6} {c.get('id', '?'):28} {c.get('duration_s', 0):7.1f} s  "
          f"{c.get('summary', '')}")
    for fact in c.get("facts", []):
        if fact.get("name", "").endswith("_data_mismatch") or fact.get("name") == "wrong_elements":
            print(f"       fact {fact['name']}: {fact.get('value')}")
backend = ev.get("backend", {})
print(f"backend: {backend.get('name')}; NCCL {backend.get('nccl_version')}; "
      f"NCCL env {backend.get('nccl_env')}")
for lib in backend.get("libraries", []):
    print(f"  {lib.get('name'):16} {lib.get('version') or '-':14} {lib.get('path') or 'not found'}")


def median(name, gpu=0):
    for c in ev.get("checks", []):
        for m in c.get("metrics", []):
            if m.get("name") == name and m.get("subject", {}).get("gpu") == gpu:
                return m.get("median")
    return None


rows = [
    ("H2D pinned", "h2d", "h2d_pinned_GBps"),
    ("D2H pinned", "d2h", "d2h_pinned_GBps"),
    ("device copy (r+w)", "device_copy", "d2d_copy_GBps_read_plus_write"),
]
ok = True
print("--- nodecert against PyTorch (GB/s), goal: ratio >= 0.98")
print(f"{'figure':20} {'nodecert':>10} {'pytorch':>10} {'ratio':>7}  goal")
for label, ours_key, torch_key in rows:
    ours, theirs = median(ours_key), torch.get(torch_key)
    if ours is None or not theirs:
        shown = "-" if ours is None else f"{ours:.1f}"
        print(f"{label:20} {shown:>10} {theirs or '-':>10} {'-':>7}  MISSING")
        ok = False
        continue
    ratio = ours / theirs
    met = ratio >= 0.98
    ok &= met
    print(f"{label:20} {ours:10.1f} {theirs:10.1f} {ratio:7.3f}  {'met' if met else 'MISSED'}")
both = median("bidir")
if both is not None:
    print(f"{'H2D+D2H at once':20} {both:10.1f} {'-':>10} {'-':>7}  (Rust probe measured 96.9)")

print("--- nodecert's training step against PyTorch's (ms), goal: ratio <= 1.1")
try:
    with open(train_path) as f:
        train = next(c for c in json.load(f).get("checks", []) if c.get("id") == "training")
except (OSError, ValueError, StopIteration) as e:
    train = None
    print(f"no training evidence ({e}); nodecert exit {trc}")
    ok = False
if train is not None:
    print(f"training check: {train.get('status')}: {train.get('summary')}")
    for finding in train.get("findings", []):
        print(f"  {finding.get('status', '?'):6} {finding.get('reason', finding)}")
    metrics = {m.get("name"): m for m in train.get("metrics", []) if not m.get("subject")}
    step = metrics.get("step_time", {}).get("median")
    theirs = torch.get("mlp_train_step_ms_fp32")
    if step is None or not theirs:
        print(f"step time: nodecert {step}, PyTorch {theirs}: MISSING")
        ok = False
    else:
        ratio = step / theirs
        met = ratio <= 1.1
        ok &= met
        # GEMM work of one step: 2*B*(sum in*out) forward and for dW, 2*B*(sum_{l>0} in*out) for dX.
        flops = 964_085_940_224
        print(f"{'MLP train step':20} {step:10.2f} {theirs:10.2f} {ratio:7.3f}  "
              f"{'met' if met else 'MISSED'}  ({flops / step / 1e9:.1f} TFLOP/s in GEMMs)")
    for name in ("comm_time", "exposed_comm_time", "samples_per_s"):
        if name in metrics:
            print(f"  {name}: median {metrics[name].get('median')} {metrics[name].get('unit')}")
    for name in ("loss", "golden_node_loss", "golden_cpu_loss"):
        if name in metrics:
            print(f"  {name}: {[round(v, 5) for v in metrics[name].get('samples', [])][:10]}")
    for fact in train.get("facts", []):
        print(f"  fact {fact.get('name')} {fact.get('subject')}: {fact.get('value')}")
    ok &= train.get("status") in ("pass", "warn")

met = wall < 60.0
ok &= met
print(f"whole suite wall time: {wall:.1f} s (goal < 60 s): {'met' if met else 'MISSED'}; "
      f"nodecert exit {rc}; verdict {ev.get('verdict')}")
sys.exit(0 if ok else 1)
PY
}

case "${1:-}" in
prepare) prepare ;;
run) run ;;
*)
    echo "usage: $0 prepare|run" >&2
    exit 2
    ;;
esac
