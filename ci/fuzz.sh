#!/usr/bin/env bash
# Coverage-guided fuzzing of what nodecert reads from others: evidence, fleet reports, suites,
# simulated node files, and the small parsers of kernel logs, host lists, CPU lists, NCCL and
# ldconfig text, Slurm reasons and signature manifests (fuzz/fuzz_targets). Needs a nightly
# toolchain and cargo-fuzz (`cargo install cargo-fuzz`); not part of `.ci/run`.
#
#   bash ci/fuzz.sh seeds          write the seed corpora (real suites, node files, the evidence
#                                  and fleet reports simulated runs write) into target/fuzz-seeds
#   bash ci/fuzz.sh run [SECONDS]  build, then fuzz each target for SECONDS (default 300) from its
#                                  seeds; crashes land in fuzz/artifacts/TARGET
#
# A crash found here becomes a regression test in tests/ with its input, and the fix lands with
# it.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=target/fuzz-seeds
targets=(evidence fleet suite node parsers)

make_seeds() {
  rm -rf "$seeds"
  mkdir -p "$seeds"/{evidence,fleet,suite,node,parsers}
  # NODECERT_BIN: a nodecert already built (else the release build is made).
  local bin=${NODECERT_BIN:-target/release/nodecert} tmp
  [ -n "${NODECERT_BIN:-}" ] || cargo build --release -q
  tmp=$(mktemp -d)
  cp suites/*.toml tests/fixtures/real-nodes/*.suite.toml "$seeds/suite/"
  cp suites/nodes/*.toml "$seeds/node/"
  for f in tests/fixtures/real-nodes/*.toml; do
    case $f in *.suite.toml) ;; *) cp "$f" "$seeds/node/real-$(basename "$f")" ;; esac
  done
  # Evidence of every simulated SKU, passing and with faults that change each kind of verdict.
  local n=0
  for node in h100-sxm-8 h200-sxm-8 a100-sxm-80gb-8 l40s-pcie-4 h200-vm-1 h100-vm-1; do
    "$bin" run --simulate "$node" --out "$tmp/$node" -q >/dev/null 2>&1 || true
    [ -e "$tmp/$node/evidence.json" ] && cp "$tmp/$node/evidence.json" "$seeds/evidence/$node.json"
  done
  for fault in nvlink-down:gpu=1 gpu-lost:gpu=2 xid:gpu=0 slow-gpu-pair:gpu=0,peer=1 \
    ecc-uncorrectable:gpu=3 nvls-unavailable collective-corrupt nic-down:nic=1; do
    n=$((n + 1))
    "$bin" run --simulate h100-sxm-8 --inject "$fault" --out "$tmp/f$n" -q >/dev/null 2>&1 || true
    [ -e "$tmp/f$n/evidence.json" ] && cp "$tmp/f$n/evidence.json" "$seeds/evidence/fault-$n.json"
  done
  "$bin" fleet simulate --nodes 4 --node l40s-pcie-4 --inject n02:gpu-lost:gpu=1 \
    --out "$tmp/fleet" >/dev/null 2>&1 || true
  [ -e "$tmp/fleet/fleet/fleet.json" ] && cp "$tmp/fleet/fleet/fleet.json" "$seeds/fleet/"
  # The parsers' seeds: the first byte picks the parser (fuzz_targets/parsers.rs).
  local i=0
  seed() { printf "\\$(printf '%03o' "$1")%s" "$2" >"$seeds/parsers/$1-$i"; i=$((i + 1)); }
  seed 0 '[ 1234.567890] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.'
  seed 1 'gpu-[001-004,7],n[1-2]x'
  seed 2 '0-3,8,10-11'
  seed 3 $'NCCL_DEBUG=INFO\nNCCL_IB_HCA = mlx5_0,mlx5_1 # comment\n'
  seed 4 $'\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n'
  seed 5 $'n01|nodecert: fail\nn02|none\n'
  seed 7 'slow-gpu-pair:gpu=0,peer=1,factor=0.5,attempts=2'
  seed 8 '80 GiB'
  seed 9 '550.54.15'
  seed 10 '400 Gb/sec (4X NDR)'
  seed 11 '90s'
  seed 12 'n03:nvlink-down:gpu=2'
  seed 13 'nodecert: gpu 3 "fell" off; rm -rf /'
  "$bin" keygen --out "$tmp/key" >/dev/null 2>&1 || true
  "$bin" sign --key "$tmp/key" "$tmp/h100-sxm-8" >/dev/null 2>&1 || true
  if [ -e "$tmp/h100-sxm-8/nodecert-manifest.txt" ]; then
    { printf '\006'; cat "$tmp/h100-sxm-8/nodecert-manifest.txt"; } >"$seeds/parsers/6-manifest"
  fi
  rm -rf "$tmp"
  echo "seeds: $(find "$seeds" -type f | wc -l) files in $seeds"
}

case "${1:-}" in
  seeds) make_seeds ;;
  run)
    secs=${2:-300}
    [ -d "$seeds" ] || make_seeds
    cargo +nightly fuzz build -O
    for t in "${targets[@]}"; do
      mkdir -p "target/fuzz-corpus/$t"
      echo "== $t ($secs s)"
      cargo +nightly fuzz run -O "$t" "target/fuzz-corpus/$t" "$seeds/$t" -- \
        -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=262144
    done
    ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
