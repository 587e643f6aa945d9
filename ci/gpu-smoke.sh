#!/usr/bin/env bash
# nodecert on a real GPU machine, in one call: the checks of issues 3, 4 and 5 that need a GPU.
# See shared/notes/gpu-stack.md, "Running on the lent GPU machine": that machine has no Rust and no
# network, and device time is short, so everything is prepared here and runs there at once.
#
#   ci/gpu-smoke.sh prepare    here, on the CPU machine: build the release binary and copy it and
#                              shared/bench/torch_anchor.py into .gpu/ (ignored by git)
#   ci/gpu-smoke.sh run        there, one call of the device tool with carry [".gpu"] and
#                              timeout_s 420: `bash ci/gpu-smoke.sh run` (the session's 15 minutes
#                              then leave room to start a machine again and rerun it)
#   ci/gpu-smoke.sh dry-run    here: the same steps against the simulated 1x H200 node, with the
#                              PyTorch figures captured on the H200 (tests/fixtures/...); checks
#                              that the script and its summary work before device time is spent
#                              (SMOKE_NODE=h100-vm-1: the simulated 1x H100, still held to the
#                              H200's PyTorch figures, so its ratios are not goals)
#
# The device tool lends a 1x H100 (its first kind, "nvidia-h100-x1") or a 1x H200: the model
# nvidia-smi names picks the suite that the run is held to and that the summary expects
# (profile.json): an H200 runs h200-vm-1, an H100 h100-vm-1. Any other model runs the node's
# own frozen suite from step 1, and the summary says that no profile expected it.
#
# `run` does, keeping every output under $OUT (the device tool brings it back):
#   1. nodecert inventory, inventory --json and inventory --as-suite (issue 3);
#   2. nodecert run SUITE (h200-vm-1 or h100-vm-1, by the model), timed: inventory to rendered report (issues 3 and 4);
#   3. shared/bench/torch_anchor.py, in the same call;
#   4. nodecert run suites/training-anchor.toml: PyTorch's anchor MLP step alone (issue 5);
#   5. nodecert run of the frozen suite from step 1: the node must pass its own handover suite;
#      then suites/training-anchor-bf16.toml, the same step in bf16 mixed precision (evidence
#      under train-bf16/, held to ci/torch_partition.py's bf16 step in the summary);
#      then the child that measures all_reduce with NVLS forced off, alone (no-nvls.out);
#      then health-check --mode npd, keygen + sign + verify of the suite's report, and the training
#      suite with CUDA_VISIBLE_DEVICES empty (must exit 3, the node untestable, not failed);
#   6. ci/gpu_summary.py: what the inventory says against what the issue expects, each check's
#      verdict, the ratio table (H2D, D2H, device copy >= 0.98 of PyTorch; GEMMs >= 0.97;
#      training step <= 1.1x PyTorch's in fp32 and bf16; the whole suite < 60 s), and last the
#      first-contact steps' exit statuses (health 0, sign 0, verify 0, verify --require-pass
#      the suite's own exit, hidden GPU 3).
# Exit status: 0 when every goal is met, 1 when one is missed, 2 when something could not run.
# It never changes the GPU's clocks, power, persistence, MIG or compute mode.
set -uo pipefail
cd "$(dirname "$0")/.."

DIR=.gpu

prepare() {
    local shared=${SHARED_DIR:-../shared}
    set -e
    cargo build --release
    mkdir -p "$DIR"
    cp target/release/nodecert "$DIR/nodecert"
    cp "$shared/bench/torch_anchor.py" "$DIR/torch_anchor.py"
    git check-ignore -q "$DIR/nodecert" || {
        echo "$DIR is not ignored by git: the device tool would not carry it as asked" >&2
        exit 2
    }
    echo "prepared $DIR: $(find "$DIR" -maxdepth 1 -type f -printf '%f ')"
    echo "next: device tool, carry [\"$DIR\"], timeout_s 420, command: bash ci/gpu-smoke.sh run"
}

# Run one step with a time limit; keep its output and exit status, whatever it returns. No step
# runs past the call's deadline, so the summary always gets its turn; a step with under 15 s left
# is not started (exit 125).
step() {
    local name=$1 limit=$2
    shift 2
    local t0 t1 rc=0 left
    left=$((deadline - $(date +%s)))
    if [ "$left" -lt 15 ]; then
        echo "not started: ${left} s left of the call's budget" >"$out/$name.err"
        : >"$out/$name.out"
        echo 125 >"$out/$name.rc"
        echo "== $name: not started, ${left} s left"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    t0=$(date +%s.%N)
    timeout "$limit" "$@" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
    t1=$(date +%s.%N)
    echo "$rc" >"$out/$name.rc"
    python3 -c "print(f'{$t1 - $t0:.2f}')" >"$out/$name.wall_s"
    echo "== $name: exit $rc in $(cat "$out/$name.wall_s") s"
}

smoke() {
    local mode=$1
    out=${OUT:-$DIR/out}
    mkdir -p "$out"
    local bin=$DIR/nodecert sim=() anchor model node
    if [ "$mode" = dry-run ]; then
        bin=${NODECERT_BIN:-target/release/nodecert}
        node=${SMOKE_NODE:-h200-vm-1}
        sim=(--simulate "$node")
        anchor=tests/fixtures/h200-firecracker-1gpu/anchor.json
        case $node in
        h200-vm-1) model="NVIDIA H200" ;;
        h100-vm-1) model="NVIDIA H100 80GB HBM3" ;;
        *)
            echo "SMOKE_NODE=$node: h200-vm-1 or h100-vm-1" >&2
            exit 2
            ;;
        esac
    else
        model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    fi
    # The suite the run is held to, by the GPU's exact model name (a GH200 or an H100 PCIe is
    # neither shape); the summary reads it from profile.json. A dry run on another node than the
    # H200, whose PyTorch figures it borrows, shows its ratios but does not hold it to them.
    local suite expect_model goals=true
    case $model in
    "NVIDIA H200") suite=h200-vm-1 expect_model="NVIDIA H200" ;;
    "NVIDIA H100 80GB HBM3") suite=h100-vm-1 expect_model="NVIDIA H100 80GB HBM3" ;;
    *) suite="" expect_model="" ;;
    esac
    [ "$mode" = dry-run ] && [ "$node" != h200-vm-1 ] && goals=false
    python3 -c 'import json, sys; print(json.dumps({"model_seen": sys.argv[1], "suite": sys.argv[2] or None, "model": sys.argv[3] or None, "ratios_are_goals": sys.argv[4] == "true"}))' \
        "$model" "$suite" "$expect_model" "$goals" >"$out/profile.json"
    echo "GPU model: ${model:-none read}; suite: ${suite:-none for this model, the frozen one}"
    if [ ! -x "$bin" ]; then
        echo "no nodecert binary at $bin: run 'ci/gpu-smoke.sh prepare' (or cargo build --release)" >&2
        exit 2
    fi
    {
        echo "host: $(hostname), mode: $mode"
        uname -a
        nvidia-smi -L 2>&1 || true
        nvidia-smi --query-gpu=name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,clocks.sm,temperature.gpu \
            --format=csv 2>&1 || true
        echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
    } >"$out/machine.txt"
    cat "$out/machine.txt"

    # The device call is given 420 s: the steps share SMOKE_BUDGET_S (360 s) and leave the rest
    # to the summary. A session has 15 minutes of device time and a start costs one or two, so
    # a call of 600 s could not be repeated once something is fixed; the steps of the H200's
    # run of 2026-12-04 took about 140 s. Most important first: the suite, then PyTorch's
    # figures that the ratios need, then the training step, then the re-runs.
    deadline=$(($(date +%s) + ${SMOKE_BUDGET_S:-360}))
    # Each step has its own time limit (below), so a hung measurement costs that step, not the
    # call. NCCL's messages go to files of their own: NCCL writes to stdout unless
    # NCCL_DEBUG_FILE is set, and one warning line in torch.out would make it not JSON.
    export NCCL_DEBUG=${NCCL_DEBUG:-WARN} NCCL_DEBUG_FILE="$(cd "$out" && pwd)/nccl.%h.%p.log"
    step inventory 60 "$bin" inventory "${sim[@]}"
    step inventory-json 60 "$bin" inventory "${sim[@]}" --json
    step as-suite 60 "$bin" inventory "${sim[@]}" --as-suite "$out/frozen-suite.toml" --force
    step suite 240 "$bin" run "${suite:-$out/frozen-suite.toml}" "${sim[@]}" --out "$out/report"
    if [ "$mode" = dry-run ]; then
        cp "$anchor" "$out/torch.out"
        echo "== torch: the figures captured on the H200 ($anchor)"
    else
        step torch 180 python3 "$DIR/torch_anchor.py"
    fi
    if [ "$mode" = dry-run ]; then
        # The two GEMM figures PyTorch gave on the H200 (fp32 with TF32 off, bf16 8192^3).
        python3 -c "import json; a = json.load(open('$anchor')); print(json.dumps({'fp32_TFLOPs': a['gemm_fp32_TFLOPs'], 'bf16_TFLOPs': a['gemm_bf16_TFLOPs']}))" >"$out/torch-gemm.out"
        echo "== torch-gemm: the figures captured on the H200 ($anchor)"
    else
        step torch-gemm 120 python3 ci/torch_gemm.py 8192
        # The same MLP (ReLU, as nodecert's) data-parallel in PyTorch on this one GPU: the
        # like-for-like reference of the training step (issue 17); the tensor-parallel and
        # hybrid references need several GPUs (torchrun --nproc_per_node=N ... tensor|hybrid2).
        step torch-partition 120 torchrun --standalone --nproc_per_node=1 ci/torch_partition.py data
        # The same step in bf16 as nodecert computes it (bf16 GEMM operands written to fp32): the
        # reference of nodecert's bf16 run; then PyTorch's usual autocast, for comparison only.
        step torch-partition-bf16 120 torchrun --standalone --nproc_per_node=1 ci/torch_partition.py \
            data 1024,4096,4096,10 8192 bf16
        step torch-partition-autocast 120 torchrun --standalone --nproc_per_node=1 \
            ci/torch_partition.py data 1024,4096,4096,10 8192 autocast
    fi
    step train 150 "$bin" run suites/training-anchor.toml "${sim[@]}" --out "$out/train"
    step frozen 150 "$bin" run "$out/frozen-suite.toml" "${sim[@]}" --out "$out/frozen"
    step train-bf16 90 "$bin" run suites/training-anchor-bf16.toml "${sim[@]}" --out "$out/train-bf16"
    # The child that measures all_reduce with NVLS forced off (issue 14 item 3), called as nodecert
    # calls it: on one GPU NCCL has no NVLS to turn off, but the child must open the GPU, run
    # NCCL under NCCL_NVLS_ENABLE=0 and answer one reply line.
    local target='{"real":{"bus_ids":[]}}'
    [ "$mode" = dry-run ] && target="{\"simulated\":{\"node\":\"$node\",\"faults\":[],\"seed\":1}}"
    step no-nvls 60 env NCCL_NVLS_ENABLE=0 "$bin" __collective-no-nvls \
        "{\"protocol\":1,\"op\":\"all_reduce\",\"sizes\":[1048576,67108864],\"warmup\":1,\"iters\":5,\"target\":$target}"
    # First contact with the rest of the job (seconds each): the quick health profile under a
    # node-problem-detector's exit codes; a throwaway key signs the suite's report and the
    # signature is verified, as a provider hands a real certificate over; and the same training
    # suite with CUDA shown no GPU (NVML still sees it), which must be "could not be tested"
    # (exit 3) with its reason, never a failed or a slow node.
    step health 60 "$bin" health-check "${suite:-$out/frozen-suite.toml}" "${sim[@]}" --mode npd
    # The key lives outside $OUT (which comes back from the device) and is new each time.
    local keydir
    keydir=$(mktemp -d)
    step keygen 20 "$bin" keygen --out "$keydir/throwaway-key"
    step sign 30 "$bin" sign "$out/report" --key "$keydir/throwaway-key"
    step verify 30 "$bin" verify "$out/report" --pubkey "$keydir/throwaway-key.pub"
    step gate 30 "$bin" verify "$out/report" --pubkey "$keydir/throwaway-key.pub" --require-pass
    rm -rf "$keydir"
    step no-gpu 60 env CUDA_VISIBLE_DEVICES= "$bin" run suites/training-anchor.toml "${sim[@]}" \
        --out "$out/no-gpu"

    echo
    for name in inventory suite frozen train no-nvls health sign verify gate no-gpu; do
        echo "== $name (exit $(cat "$out/$name.rc")): last lines"
        tail -n 30 "$out/$name.out"
        tail -n 10 "$out/$name.err"
        echo
    done
    python3 ci/gpu_summary.py "$out"
    local status=$?
    if [ "$mode" = run ] && [ -n "${OUT:-}" ]; then
        # The device tool brings back at most 8 files from $OUT: all of it goes back as one.
        local pack
        pack=$(mktemp -d)
        tar czf "$pack/smoke.tgz" -C "$out" . && find "$out" -mindepth 1 -delete &&
            mv "$pack/smoke.tgz" "$out/" && echo "everything is in \$OUT/smoke.tgz"
        rm -rf "$pack"
    fi
    return $status
}

case "${1:-}" in
prepare) prepare ;;
run) smoke run ;;
dry-run) smoke dry-run ;;
*)
    echo "usage: $0 prepare|run|dry-run" >&2
    exit 2
    ;;
esac
