#!/usr/bin/env bash
# Smoke test of nodecert on a real GPU machine (the lent H200, see shared/notes/gpu-stack.md,
# "Running on the lent GPU machine"). That machine has no Rust: build here first,
#   cargo build --release && mkdir -p .gpu && cp target/release/nodecert .gpu/
# then run this script there with .gpu carried along. It never changes the GPU's settings.
#
# Usage: ci/gpu-smoke.sh [NODECERT_BINARY]   (default: .gpu/nodecert)
# Output goes to $OUT when set (the device tool fetches it), else to a temp dir.
set -u

bin="${1:-.gpu/nodecert}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"

if [ ! -x "$bin" ]; then
    echo "gpu-smoke: no nodecert binary at $bin (build it here, copy it to .gpu/)" >&2
    exit 2
fi

# Run one step, keep its output and exit code, and go on whatever it returns.
step() {
    local name="$1"
    shift
    "$@" >"$out/$name.out" 2>"$out/$name.err"
    local rc=$?
    echo "$rc" >"$out/$name.rc"
    echo "== $name: exit $rc"
}

{
    echo "host: $(hostname)"
    uname -a
    nvidia-smi -L 2>&1 || true
    echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
} >"$out/machine.txt"

step inventory "$bin" inventory
step inventory-json "$bin" inventory --json
step as-suite "$bin" inventory --as-suite "$out/frozen-suite.toml"
step run "$bin" run h200-vm-1 --out "$out/report"

echo
echo "== inventory"
cat "$out/inventory.out" "$out/inventory.err"
echo
echo "== run h200-vm-1"
cat "$out/run.out" "$out/run.err"
echo
echo "outputs in $out"

# The inventory must work on a GPU machine; `run` may end in 3 while measurements are missing.
for name in inventory inventory-json as-suite; do
    [ "$(cat "$out/$name.rc")" = 0 ] || exit 1
done
