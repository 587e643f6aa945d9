#!/usr/bin/env bash
# End-to-end test of ci/slurm.sh: a real Slurm cluster up, jobs on it, drain and resume, a health
# check that drains, a second cluster beside it, down, nothing of ours left, and up again.
# Needs root (and apt, if Slurm is not installed yet). Exit status: 0 pass, 1 fail.
#
#   ci/test_slurm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SLURM_SH=$PWD/ci/slurm.sh

WORK=$(mktemp -d /tmp/nodecert-slurm-test.XXXXXX)
chmod 0755 "$WORK" # munged (user munge) must reach the cluster folders below it
A=$WORK/a          # the cluster the test runs on
B=$WORK/b          # a second one, up at the same time
UP=()              # clusters up now, stopped on the way out whatever happens

fail() {
    echo "test_slurm.sh: FAIL: $*" >&2
    exit 1
}
step() { echo "test_slurm.sh: $*"; }
ms() { echo $(($(date +%s%N) / 1000000)); }

cleanup() {
    local rc=$? d
    for d in "${UP[@]}"; do
        "$SLURM_SH" down "$d" >/dev/null 2>&1 || echo "test_slurm.sh: could not stop the cluster in $d" >&2
    done
    if [ "$rc" = 0 ]; then
        rm -rf -- "$WORK"
    else
        echo "test_slurm.sh: left $WORK for its logs" >&2
    fi
}
trap cleanup EXIT

up() {
    local t0
    t0=$(ms)
    "$SLURM_SH" up "$@" || fail "ci/slurm.sh up $* failed"
    UP+=("$1")
    step "up $* took $(($(ms) - t0)) ms"
}
down() {
    local d=$1 t0 keep=() x
    t0=$(ms)
    "$SLURM_SH" down "$d" || fail "ci/slurm.sh down $d failed"
    for x in "${UP[@]}"; do [ "$x" = "$d" ] || keep+=("$x"); done
    UP=("${keep[@]}")
    step "down $d took $(($(ms) - t0)) ms"
}

# Slurm commands against one cluster, never waiting for ever.
on() {
    local d=$1
    shift
    SLURM_CONF=$d/slurm.conf timeout 60 "$@"
}

# Reads /proc/$1 with builtins only (no ps: a minimal Debian has no procps; and fast): sets
# STATE (R, S, Z...), COMM and ARGS (the command line, NULs as spaces); fails if it is gone.
read_proc() {
    local stat args=()
    { read -r stat <"/proc/$1/stat" && read -r COMM <"/proc/$1/comm" &&
        mapfile -d '' -t args <"/proc/$1/cmdline"; } 2>/dev/null || return 1
    stat=${stat##*) }
    STATE=${stat%% *}
    ARGS="${args[*]}"
}

# The live, non-zombie processes whose command line names $1/ (what up started there), as
# "pid args" lines.
processes_in() {
    local p
    for p in /proc/[0-9]*; do
        read_proc "${p#/proc/}" || continue
        if [[ $STATE != Z && $ARGS == *"$1/"* ]]; then echo "${p#/proc/} $ARGS"; fi
    done
}

# slurmstepd (a job step's) and slurmscriptd (slurmctld's) processes, which carry no folder in
# their command line: their pids, sorted as text (for comm).
helpers() {
    local p
    for p in /proc/[0-9]*; do
        read_proc "${p#/proc/}" || continue
        if [[ $STATE != Z && ($COMM == slurmstepd || $COMM == slurmscriptd) ]]; then echo "${p#/proc/}"; fi
    done | sort
}

# After down: no pid up recorded alive, no process naming the folder, no new slurmstepd or
# slurmscriptd.
check_nothing_left() {
    local d=$1 pids=$2 helpers_before=$3 pid left
    [ ! -e "$d/pids" ] || fail "down left $d/pids"
    for pid in $pids; do
        if read_proc "$pid" && [ "$STATE" != Z ] && [[ $ARGS == *"$d/"* ]]; then
            fail "pid $pid of $d is still running after down"
        fi
    done
    left=$(processes_in "$d")
    [ -z "$left" ] || fail "processes of $d still running after down: $left"
    # slurmscriptd ends on its own once slurmctld has: give it a moment.
    for _ in $(seq 25); do
        left=$(comm -13 <(echo "$helpers_before") <(helpers))
        [ -z "$left" ] && break
        sleep 0.2
    done
    [ -z "$left" ] || fail "slurmstepd or slurmscriptd processes started by the test still running: $left"
}

# Waits up to $3 s until `sinfo -N -h -o '%N %t %E'` on cluster $1 has the line $2.
wait_node() {
    local d=$1 want=$2 limit=$3 t0 got
    t0=$(ms)
    while (($(ms) - t0 < limit * 1000)); do
        got=$(on "$d" sinfo -N -h -o '%N %t %E') || fail "sinfo failed on $d"
        if grep -qxF -- "$want" <<<"$got"; then
            echo $(($(ms) - t0))
            return 0
        fi
        sleep 0.2
    done
    fail "after $limit s, sinfo has no line '$want'; it says:
$got"
}

# Runs a command that must exit with status $1; its output goes to $WORK/last.log.
expect_rc() {
    local want=$1 rc=0
    shift
    "$@" >"$WORK/last.log" 2>&1 || rc=$?
    [ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(cat "$WORK/last.log")"
}

[ "$(id -u)" = 0 ] || fail "needs root"
helpers_before=$(helpers)

# 0. Wrong input is refused before anything starts.
expect_rc 2 "$SLURM_SH"
expect_rc 2 "$SLURM_SH" start "$A"
expect_rc 2 "$SLURM_SH" down
expect_rc 1 "$SLURM_SH" up "$A" 0
expect_rc 1 "$SLURM_SH" up "$A" 65
expect_rc 1 "$SLURM_SH" up "$A" 4x
expect_rc 1 "$SLURM_SH" up "$WORK/a b"
expect_rc 1 env NODECERT_SLURM_HEALTHCHECK="$WORK/missing" "$SLURM_SH" up "$A"
expect_rc 1 env NODECERT_SLURM_HEALTHCHECK=relative/prog "$SLURM_SH" up "$A"
expect_rc 1 env NODECERT_SLURM_WAIT=0 "$SLURM_SH" up "$A"
expect_rc 1 env NODECERT_SLURM_PORT=80 "$SLURM_SH" up "$A"
[ ! -e "$A/pids" ] || fail "a refused up wrote $A/pids"
[ -z "$(processes_in "$WORK")" ] || fail "a refused up started: $(processes_in "$WORK")"

# A health check that drains n3 once told to (the trigger file): it gets SLURMD_NODENAME and no
# other environment from slurmd, so it names scontrol's config itself.
HC=$WORK/healthcheck
cat >"$HC" <<EOF
#!/bin/bash
if [ "\$SLURMD_NODENAME" = n3 ] && [ -e "$WORK/drain-n3" ]; then
    SLURM_CONF="$A/slurm.conf" exec scontrol update NodeName="\$SLURMD_NODENAME" State=DRAIN Reason="nodecert: health"
fi
EOF
chmod 0755 "$HC"

# 1. Up, with the health check.
NODECERT_SLURM_HEALTHCHECK=$HC up "$A"
grep -qxF "HealthCheckProgram=$HC" "$A/slurm.conf" || fail "slurm.conf has no HealthCheckProgram=$HC"
grep -qxF "export SLURM_CONF=$A/slurm.conf" "$A/env" || fail "$A/env does not export SLURM_CONF"
[ "$(wc -l <"$A/pids")" = 6 ] || fail "expected 6 pids (munged, slurmctld, 4 slurmd), $A/pids has: $(cat "$A/pids")"
got=$(on "$A" sinfo -N -h -o '%N %t')
[ "$got" = $'n1 idle\nn2 idle\nn3 idle\nn4 idle' ] || fail "after up, sinfo says: $got"
# An up where a cluster is up is refused, and leaves that cluster alone.
pids_a=$(cat "$A/pids")
expect_rc 1 "$SLURM_SH" up "$A"
grep -q "run: .* down $A" "$WORK/last.log" || fail "a second up does not say to run down: $(cat "$WORK/last.log")"
[ "$(cat "$A/pids")" = "$pids_a" ] || fail "a refused second up changed $A/pids"

# 2. srun: one rank per node, n1..n4 are ranks 0..3 of one job of 4 tasks.
t0=$(ms)
# shellcheck disable=SC2016 # expanded by the task
got=$(on "$A" srun -N4 --ntasks-per-node=1 bash -c 'echo $SLURMD_NODENAME $SLURM_PROCID $SLURM_NTASKS $SLURM_JOB_ID' | sort) ||
    fail "srun -N4 failed"
step "srun -N4 took $(($(ms) - t0)) ms"
read -r _ _ _ job <<<"$got"
[[ $job =~ ^[0-9]+$ ]] || fail "srun printed no job id: $got"
[ "$got" = "n1 0 4 $job"$'\n'"n2 1 4 $job"$'\n'"n3 2 4 $job"$'\n'"n4 3 4 $job" ] || fail "srun ranks: $got"

# 3. sbatch --wait: an exclusive 4-node job whose srun writes one file per node in a shared folder.
out=$WORK/out
mkdir "$out"
cat >"$WORK/job.sh" <<EOF
#!/bin/bash
#SBATCH -N 4 --ntasks-per-node=1 --exclusive
#SBATCH -o $out/job-%j.log
srun bash -c 'echo "\$SLURM_PROCID \$SLURM_JOB_ID" >"$out/\$SLURMD_NODENAME"'
EOF
t0=$(ms)
submitted=$(cd "$WORK" && on "$A" sbatch --wait "$WORK/job.sh") || fail "sbatch --wait failed: $submitted"
step "sbatch --wait of 4 tasks took $(($(ms) - t0)) ms"
job=${submitted##* }
[[ $job =~ ^[0-9]+$ ]] || fail "sbatch printed no job id: $submitted"
for n in 1 2 3 4; do
    [ -f "$out/n$n" ] || fail "the batch job wrote no $out/n$n (files: $(ls "$out"))"
    [ "$(cat "$out/n$n")" = "$((n - 1)) $job" ] || fail "$out/n$n says '$(cat "$out/n$n")', not '$((n - 1)) $job'"
done
[ "$(find "$out" -type f -name 'n*' | wc -l)" = 4 ] || fail "the batch job wrote other files: $(ls "$out")"

# 4. Drain with a reason, and resume.
on "$A" scontrol update NodeName=n2 State=DRAIN Reason="nodecert: test" || fail "scontrol drain failed"
wait_node "$A" "n2 drain nodecert: test" 5 >/dev/null
on "$A" scontrol update NodeName=n2 State=RESUME || fail "scontrol resume failed"
wait_node "$A" "n2 idle none" 10 >/dev/null

# 5. The health check drains n3 once the trigger is there (HealthCheckInterval=5).
touch "$WORK/drain-n3"
took=$(wait_node "$A" "n3 drain nodecert: health" 15)
step "health check drained n3 in $took ms"
rm -f "$WORK/drain-n3"
on "$A" scontrol update NodeName=n3 State=RESUME || fail "scontrol resume n3 failed"
wait_node "$A" "n3 idle none" 10 >/dev/null

# 6. A second cluster beside the first: its own munged and ports; its down leaves the first alone.
helpers_before_b=$(helpers)
up "$B" 2
ctl_a=$(sed -n 's/^SlurmctldPort=//p' "$A/slurm.conf")
ctl_b=$(sed -n 's/^SlurmctldPort=//p' "$B/slurm.conf")
[ "$ctl_a" != "$ctl_b" ] || fail "both clusters' controllers on port $ctl_a"
# shellcheck disable=SC2016 # expanded by the task
got=$(on "$B" srun -N2 bash -c 'echo $SLURMD_NODENAME $SLURM_PROCID' | sort) || fail "srun on the second cluster failed"
[ "$got" = $'n1 0\nn2 1' ] || fail "srun on the second cluster: $got"
pids_b=$(cat "$B/pids")
down "$B"
check_nothing_left "$B" "$pids_b" "$helpers_before_b"
got=$(on "$A" sinfo -N -h -o '%N %t')
[ "$got" = $'n1 idle\nn2 idle\nn3 idle\nn4 idle' ] || fail "the first cluster after the second's down: $got"
while read -r pid; do
    kill -0 "$pid" 2>/dev/null || fail "the second cluster's down stopped pid $pid of the first"
done <"$A/pids"

# 7. Down with a job running on every node: the job goes too (its tasks' command lines name $A/,
# so processes_in sees them); nothing of ours is left; down again does nothing.
long=$(on "$A" sbatch --parsable -N4 -o /dev/null --wrap "srun bash -c 'sleep 300 && : $A/long-job'") ||
    fail "sbatch of a long job failed: $long"
for _ in $(seq 50); do
    [ "$(processes_in "$A" | grep -c '/bash -c sleep 300 ')" = 4 ] && break
    sleep 0.2
done
[ "$(processes_in "$A" | grep -c '/bash -c sleep 300 ')" = 4 ] ||
    fail "the long job is not running on 4 nodes after 10 s: $(on "$A" squeue) $(processes_in "$A")"
pids_a=$(cat "$A/pids")
down "$A"
check_nothing_left "$A" "$pids_a" "$helpers_before"
"$SLURM_SH" down "$A" >/dev/null 2>&1 || fail "a second down failed"

# 8. Up again in the same folder, no health check: a clean cluster, jobs run, down.
up "$A"
! grep -q HealthCheck "$A/slurm.conf" || fail "slurm.conf kept the health check of the previous up"
got=$(on "$A" sinfo -N -h -o '%N %t %E')
[ "$got" = $'n1 idle none\nn2 idle none\nn3 idle none\nn4 idle none' ] || fail "after the second up, sinfo says: $got"
# shellcheck disable=SC2016 # expanded by the task
got=$(on "$A" srun -N4 --ntasks-per-node=1 bash -c 'echo $SLURMD_NODENAME $SLURM_PROCID' | sort) || fail "srun after the second up failed"
[ "$got" = $'n1 0\nn2 1\nn3 2\nn4 3' ] || fail "srun after the second up: $got"
pids_a=$(cat "$A/pids")
down "$A"
check_nothing_left "$A" "$pids_a" "$helpers_before"

# 9. An up that fails (a health check drains n1 at once, so n1 is never idle) says why and stops
# everything it started.
BAD=$WORK/bad
cat >"$WORK/healthcheck-bad" <<EOF
#!/bin/bash
if [ "\$SLURMD_NODENAME" = n1 ]; then
    SLURM_CONF="$BAD/slurm.conf" exec scontrol update NodeName=n1 State=DRAIN Reason="nodecert: never idle"
fi
EOF
chmod 0755 "$WORK/healthcheck-bad"
expect_rc 1 env NODECERT_SLURM_WAIT=4 NODECERT_SLURM_HEALTHCHECK="$WORK/healthcheck-bad" "$SLURM_SH" up "$BAD" 2
grep -q "not every node idle after 4 s" "$WORK/last.log" || fail "a failed up does not say why: $(cat "$WORK/last.log")"
grep -q "n1 drain nodecert: never idle" "$WORK/last.log" || fail "a failed up does not show sinfo: $(cat "$WORK/last.log")"
grep -q -- "--- last lines of $BAD/slurmctld.log" "$WORK/last.log" || fail "a failed up shows no log: $(cat "$WORK/last.log")"
pids_bad=$(sed -n 's/^slurm.sh: started .* (pid \([0-9]*\))$/\1/p' "$WORK/last.log")
[ "$(wc -w <<<"$pids_bad")" = 4 ] || fail "a failed up started other than munged, slurmctld and 2 slurmd: $pids_bad"
check_nothing_left "$BAD" "$pids_bad" "$helpers_before"

step "pass"
