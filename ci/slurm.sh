#!/usr/bin/env bash
# A real, throw-away Slurm cluster on this one machine, for nodecert's fleet tests (issue 15).
# Recipe measured in shared/notes/fleet.md, "A real Slurm on our machines".
#
#   ci/slurm.sh up DIR [NODES]   start munged, slurmctld and NODES slurmd (default 4, at most 64),
#                                nodes n1..nNODES, all on 127.0.0.1; wait (30 s at most) until
#                                sinfo shows every node idle; then `source DIR/env` points the
#                                Slurm commands (srun, sbatch, sinfo, scontrol) at this cluster
#   ci/slurm.sh down DIR         stop exactly the processes `up` started (the pids in DIR/pids):
#                                cancel this cluster's jobs, TERM, then KILL after 10 s
#
# Run as root (Debian 12; no systemd needed). `up` installs slurm-wlm, slurmctld, slurmd,
# slurm-client and munge with apt-get when they are missing, and creates /etc/munge/munge.key when
# there is none. Everything else lives in DIR: slurm.conf, pids, env, the controller's state and
# log, one folder per node (n1/ ...: spool, log), and munge/ (a munged of this cluster alone: its
# socket, pid file, log and seed). Nothing outside DIR is removed, and no process is stopped by
# name. Two clusters can run at once in two DIRs: each gets its own munged and its own ports.
#
# Environment of `up`:
#   NODECERT_SLURM_HEALTHCHECK=/abs/prog  slurm.conf gets HealthCheckProgram=/abs/prog,
#                                HealthCheckInterval=5 and HealthCheckNodeState=ANY. Slurm runs it
#                                as root with SLURMD_NODENAME set and nothing else: no PATH, no
#                                SLURM_CONF (the program sets them itself to call scontrol).
#   NODECERT_SLURM_PORT=N        the first of NODES+1 TCP ports (controller, then n1..nNODES);
#                                default: one derived from DIR, moved on past ports in use.
#   NODECERT_SLURM_WAIT=S        seconds up waits for every node to be idle (default 30, 1..600).
# Exit status: 0 done, 1 failed (a failed `up` stops what it started and prints the logs' tails),
# 2 wrong usage.
set -euo pipefail

WAIT_UP_S=${NODECERT_SLURM_WAIT:-30} # up: every node idle within this
WAIT_TERM_S=10   # down: after TERM, KILL
WAIT_KILL_S=5    # down: after KILL, give up
WAIT_JOBS_S=10   # down: cancelled jobs gone within this
MAX_NODES=64
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client munge)

say() { echo "slurm.sh: $*" >&2; }
die() { say "$*"; exit 1; }
usage() {
    sed -n '5,10p' "$0" >&2
    exit 2
}

# A DIR goes into slurm.conf, which has no quoting: absolute, and only characters that need none.
resolve_dir() {
    local dir=$1
    [ -n "$dir" ] || usage
    dir=$(realpath -m -- "$dir")
    [[ $dir =~ ^/[A-Za-z0-9._/-]+$ ]] || die "DIR must be a path of letters, digits, '.', '_', '-' and '/': $dir"
    [ "$dir" != / ] || die "DIR must not be /"
    printf '%s\n' "$dir"
}

# --- install -------------------------------------------------------------------------------------

have_slurm() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v sinfo >/dev/null && command -v munged >/dev/null
}

install_slurm() {
    have_slurm && return 0
    say "installing: ${PACKAGES[*]}"
    export DEBIAN_FRONTEND=noninteractive
    local try
    for try in 1 2 3; do
        if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null; then
            break
        fi
        [ "$try" = 3 ] && die "apt-get failed 3 times"
        say "apt-get failed (try $try), retrying in 10 s"
        sleep 10
    done
    have_slurm || die "installed ${PACKAGES[*]}, but slurmctld, slurmd, sinfo or munged is still not on PATH ($PATH)"
}

ensure_munge_key() {
    local key=/etc/munge/munge.key
    [ -e "$key" ] && return 0
    say "creating $key"
    install -d -o munge -g munge -m 0700 /etc/munge
    # mungekey refuses to overwrite, so a key made meanwhile by someone else is kept.
    setpriv --reuid=munge --regid=munge --init-groups -- mungekey --create --keyfile="$key"
}

# --- ports ---------------------------------------------------------------------------------------

port_in_use() {
    if command -v ss >/dev/null; then
        ss -Htln "( sport = :$1 )" 2>/dev/null | grep -q .
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# The first of COUNT free consecutive ports: from NODECERT_SLURM_PORT as given, or else from a base
# that depends on DIR (two DIRs rarely start on one base), moved on past any port in use.
choose_ports() {
    local dir=$1 count=$2 base p ok tries
    if [ -n "${NODECERT_SLURM_PORT:-}" ]; then
        [[ $NODECERT_SLURM_PORT =~ ^[0-9]{4,5}$ && $NODECERT_SLURM_PORT -ge 1024 &&
            $((NODECERT_SLURM_PORT + count - 1)) -le 65535 ]] ||
            die "NODECERT_SLURM_PORT must be a port from 1024 with $count ports after it: $NODECERT_SLURM_PORT"
        base=$NODECERT_SLURM_PORT
        for ((p = base; p < base + count; p++)); do
            port_in_use "$p" && die "port $p (from NODECERT_SLURM_PORT) is in use"
        done
        echo "$base"
        return 0
    fi
    # 20000..29999, in blocks of 100 (MAX_NODES + 1 fits one block).
    base=$((20000 + ($(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 100) * 100))
    for ((tries = 0; tries < 100; tries++)); do
        ok=1
        for ((p = base; p < base + count; p++)); do
            if port_in_use "$p"; then ok=0; break; fi
        done
        if [ "$ok" = 1 ]; then echo "$base"; return 0; fi
        base=$((base + 100))
        [ "$base" -lt 30000 ] || base=20000
    done
    die "no $count free consecutive ports in 20000..29999"
}

# --- up ------------------------------------------------------------------------------------------

write_conf() {
    local dir=$1 nodes=$2 port=$3 conf=$1/slurm.conf
    local last=$((port + nodes))
    rm -f -- "$conf"
    {
        echo "# Written by ci/slurm.sh up: a throw-away test cluster, everything in $dir."
        echo "ClusterName=ci"
        echo "SlurmctldHost=localhost(127.0.0.1)"
        echo "SlurmctldPort=$port"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=$dir/munge/munge.socket"
        echo "CredType=cred/munge"
        echo "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
        echo "MpiDefault=none"
        echo "MailProg=/bin/true"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "SchedulerType=sched/backfill"
        # Batch jobs start at once rather than up to 3 s later: `sbatch --wait` polls at 2 s and
        # next at 10 s, so a trivial job that starts late costs a test 8 s more.
        echo "SchedulerParameters=batch_sched_delay=0"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        # Nodes are as this file says, whatever this machine has (CI machines may have 1 CPU).
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        echo "SlurmctldPidFile=$dir/slurmctld.pid"
        echo "SlurmdPidFile=$dir/%n/slurmd.pid"
        echo "SlurmdSpoolDir=$dir/%n"
        echo "StateSaveLocation=$dir/state"
        echo "SlurmctldLogFile=$dir/slurmctld.log"
        echo "SlurmdLogFile=$dir/%n/slurmd.log"
        if [ -n "${NODECERT_SLURM_HEALTHCHECK:-}" ]; then
            echo "HealthCheckProgram=$NODECERT_SLURM_HEALTHCHECK"
            echo "HealthCheckInterval=5"
            echo "HealthCheckNodeState=ANY"
        fi
        echo "NodeName=n[1-$nodes] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((port + 1))-$last] CPUs=2 RealMemory=2000 State=UNKNOWN"
        echo "PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=10 State=UP OverSubscribe=YES"
    } >"$conf"
}

# Every pid `up` starts goes into DIR/pids at once, so that `down` stops it even after a failed up.
record_pid() {
    local dir=$1 pid=$2 name=$3
    echo "$pid" >>"$dir/pids"
    say "started $name (pid $pid)"
}

log_tails() {
    local dir=$1 f
    for f in "$dir/munge/munged.log" "$dir/slurmctld.log" "$dir/slurmctld.out" "$dir"/n*/slurmd.log "$dir"/n*/slurmd.out; do
        [ -s "$f" ] || continue
        echo "--- last lines of $f:" >&2
        tail -n 15 -- "$f" >&2
    done
}

# Whether process $1 runs: an exited child of ours not yet waited for (a zombie) passes kill -0.
running() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# Fails unless every pid in DIR/pids still runs. (Not `ours`: for an instant after the fork, a
# daemon's command line is still this script's.)
check_alive() {
    local dir=$1 pid line=0 name
    while read -r pid; do
        line=$((line + 1))
        running "$pid" && continue
        case $line in 1) name=munged ;; 2) name=slurmctld ;; *) name="slurmd n$((line - 2))" ;; esac
        say "$name (pid $pid) has exited"
        return 1
    done <"$dir/pids"
}

start_munged() {
    local dir=$1 m=$1/munge i
    # munged insists on a folder of its own user that others cannot write.
    install -d -o munge -g munge -m 0755 "$m"
    rm -f -- "$m/munged.pid" "$m/munged.log" "$m/munge.socket" "$m/munge.socket.lock"
    # setpriv execs munged itself, so $! is munged's pid; setsid keeps it out of our session.
    setsid setpriv --reuid=munge --regid=munge --init-groups -- \
        munged --foreground --socket="$m/munge.socket" --pid-file="$m/munged.pid" \
        --log-file="$m/munged.log" --seed-file="$m/munged.seed" \
        </dev/null >>"$m/munged.out" 2>&1 &
    record_pid "$dir" "$!" munged
    for ((i = 0; i < 50; i++)); do
        if munge -n -S "$m/munge.socket" 2>/dev/null | unmunge -S "$m/munge.socket" >/dev/null 2>&1; then
            return 0
        fi
        check_alive "$dir" || return 1
        sleep 0.2
    done
    say "munged does not answer on $m/munge.socket after 10 s"
    return 1
}

start_slurm() {
    local dir=$1 nodes=$2 conf=$1/slurm.conf n
    setsid slurmctld -D -c -f "$conf" </dev/null >>"$dir/slurmctld.out" 2>&1 &
    record_pid "$dir" "$!" slurmctld
    for ((n = 1; n <= nodes; n++)); do
        mkdir -p -- "$dir/n$n"
        setsid slurmd -D -c -N "n$n" -f "$conf" </dev/null >>"$dir/n$n/slurmd.out" 2>&1 &
        record_pid "$dir" "$!" "slurmd n$n"
    done
}

wait_idle() {
    local dir=$1 nodes=$2 deadline states idle
    deadline=$((SECONDS + WAIT_UP_S))
    while ((SECONDS < deadline)); do
        check_alive "$dir" || return 1
        states=$(SLURM_CONF=$dir/slurm.conf sinfo -h -N -o '%N %t' 2>/dev/null || true)
        idle=$(grep -c ' idle$' <<<"$states" || true)
        [ "$idle" = "$nodes" ] && return 0
        sleep 0.5
    done
    say "not every node idle after $WAIT_UP_S s; sinfo says:"
    SLURM_CONF=$dir/slurm.conf sinfo -N -o '%N %t %E' >&2 || true
    return 1
}

up() {
    local dir nodes=${2:-4} port start=$SECONDS
    dir=$(resolve_dir "$1")
    [[ $nodes =~ ^[1-9][0-9]{0,2}$ && $nodes -le $MAX_NODES ]] || die "NODES must be 1..$MAX_NODES: $nodes"
    if [ -n "${NODECERT_SLURM_HEALTHCHECK:-}" ]; then
        [[ $NODECERT_SLURM_HEALTHCHECK =~ ^/[A-Za-z0-9._/-]+$ ]] ||
            die "NODECERT_SLURM_HEALTHCHECK must be an absolute path of letters, digits, '.', '_', '-' and '/'"
        [[ -f $NODECERT_SLURM_HEALTHCHECK && -x $NODECERT_SLURM_HEALTHCHECK ]] ||
            die "NODECERT_SLURM_HEALTHCHECK is not an executable file: $NODECERT_SLURM_HEALTHCHECK"
    fi
    [[ $WAIT_UP_S =~ ^[1-9][0-9]{0,2}$ && $WAIT_UP_S -le 600 ]] || die "NODECERT_SLURM_WAIT must be 1..600 seconds: $WAIT_UP_S"
    [ "$(id -u)" = 0 ] || die "up needs root (slurmd runs jobs as any user, munged as munge)"
    if [ -s "$dir/pids" ]; then
        die "$dir/pids exists: a cluster may be up there; run: $0 down $dir"
    fi
    install_slurm
    ensure_munge_key

    if [ -e "$dir" ] || [ -L "$dir" ]; then
        [[ -d $dir && ! -L $dir ]] || die "$dir exists and is not a folder"
    fi
    if [ ! -e "$dir" ]; then
        mkdir -p -- "$dir"
        chmod 0755 -- "$dir"
    fi
    # We write root's files in DIR: it must be ours, not writable by others.
    [ "$(stat -c %u "$dir")" = 0 ] || die "$dir is not owned by root"
    [ $(($(stat -c 0%a "$dir") & 022)) = 0 ] || die "$dir is writable by group or others"
    setpriv --reuid=munge --regid=munge --init-groups -- test -x "$dir" ||
        die "munged runs as user munge and cannot reach $dir: every folder down to it must be searchable by others (chmod o+x)"
    local sock=$dir/munge/munge.socket
    [ ${#sock} -lt 100 ] || die "DIR is too long for a unix socket path: $sock"

    port=$(choose_ports "$dir" $((nodes + 1)))

    # What a previous up left in DIR: state (drained nodes, jobs) and logs go; slurmctld -c and
    # slurmd -c would start clean anyway.
    rm -rf -- "$dir/state" "$dir/env" "$dir/slurmctld.log" "$dir/slurmctld.out" "$dir/slurmctld.pid"
    local d
    for d in "$dir"/n[0-9]*; do
        if [[ ${d##*/} =~ ^n[0-9]+$ && -d $d && ! -L $d ]]; then rm -rf -- "$d"; fi
    done
    mkdir -p -- "$dir/state"
    : >"$dir/pids"
    write_conf "$dir" "$nodes" "$port"

    # The daemons' working folder (health check programs start there), not the caller's.
    cd -- "$dir"
    # From here a failure stops what was started.
    # shellcheck disable=SC2064 # dir is fixed now, and has no quotes (resolve_dir)
    trap "say 'up failed'; log_tails '$dir'; stop '$dir' || true" EXIT
    start_munged "$dir"
    start_slurm "$dir" "$nodes"
    wait_idle "$dir" "$nodes"
    trap - EXIT

    rm -f -- "$dir/env"
    printf 'export SLURM_CONF=%s/slurm.conf\n' "$dir" >"$dir/env"
    say "up: $nodes nodes idle in $((SECONDS - start)) s (controller on 127.0.0.1:$port); source $dir/env"
}

# --- down ----------------------------------------------------------------------------------------

# Waits up to $2 s until none of the pids is ours any more; else fails, with those left in LIVE.
wait_gone() {
    local dir=$1 deadline=$((SECONDS + $2)) pid
    shift 2
    while :; do
        LIVE=
        for pid in "$@"; do
            if ours "$dir" "$pid"; then LIVE+="${LIVE:+ }$pid"; fi
        done
        [ -z "$LIVE" ] && return 0
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# A pid from DIR/pids is ours while its command line still names DIR/ (pids get reused; a
# zombie's is empty).
ours() {
    local dir=$1 pid=$2 args=()
    { mapfile -d '' -t args <"/proc/$pid/cmdline"; } 2>/dev/null || return 1
    [[ "${args[*]}" == *"$dir/"* ]]
}

stop() {
    local dir=$1 pid deadline
    [ -f "$dir/pids" ] || { say "nothing to stop: no $dir/pids"; return 0; }
    local pids=()
    while read -r pid; do
        [[ $pid =~ ^[0-9]+$ ]] || { say "ignoring a line of $dir/pids that is not a pid: $pid"; continue; }
        if ours "$dir" "$pid"; then
            pids+=("$pid")
        elif kill -0 "$pid" 2>/dev/null; then
            say "pid $pid is no longer ours (its command line does not name $dir), left alone"
        fi
    done <"$dir/pids"

    # Jobs still running would outlive slurmd (slurmstepd is not its child): cancel them first,
    # on this cluster only (SLURM_CONF names it).
    if [ ${#pids[@]} -gt 0 ] && [ -f "$dir/slurm.conf" ] &&
        SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null | grep -q .; then
        say "cancelling this cluster's jobs"
        # shellcheck disable=SC2046 # job ids
        SLURM_CONF=$dir/slurm.conf timeout 5 scancel --full --quiet \
            $(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null) 2>/dev/null || true
        deadline=$((SECONDS + WAIT_JOBS_S))
        while ((SECONDS < deadline)) &&
            SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null | grep -q .; do
            sleep 0.5
        done
    fi

    # Nodes first, the controller next, munged last: the reverse of the order they started in.
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    wait_gone "$dir" "$WAIT_TERM_S" "${pids[@]}" || {
        say "still running $WAIT_TERM_S s after TERM, killing: $LIVE"
        # shellcheck disable=SC2086 # LIVE is a list of pids
        kill -KILL $LIVE 2>/dev/null || true
        wait_gone "$dir" "$WAIT_KILL_S" "${pids[@]}" || die "could not stop: $LIVE"
    }
    rm -f -- "$dir/pids" "$dir/env"
    say "down: stopped ${#pids[@]} processes"
}

down() {
    local dir
    dir=$(resolve_dir "$1")
    stop "$dir"
}

case "${1:-}" in
up)
    [[ $# -ge 2 && $# -le 3 ]] || usage
    up "$2" "${3:-4}"
    ;;
down)
    [ $# -eq 2 ] || usage
    down "$2"
    ;;
*) usage ;;
esac
