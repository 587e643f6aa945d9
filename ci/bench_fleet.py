#!/usr/bin/env python3
"""Benchmark: `nodecert fleet report` over N simulated 8-GPU nodes' evidence, against the time
Python's json.load needs only to parse the same files, measured in the same run.

    python3 ci/bench_fleet.py target/release/nodecert [--nodes 1000] [--dir target/bench-fleet]

Prints each time, their ratio (goal: <= 1.0, no slower than the parse alone) and nodecert's
peak memory at a quarter of the fleet and at the whole fleet (goal: it does not grow with the
fleet: nodes are read one at a time). The nodes' evidence is generated once and kept in --dir.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def generate(nodecert, root, n):
    names = [f"n{i:04d}" for i in range(1, n + 1)]
    todo = [x for x in names if not os.path.exists(os.path.join(root, x, "evidence.json"))]
    if not todo:
        return names
    print(f"generating {len(todo)} simulated h100-sxm-8 nodes in {root} ...", flush=True)

    def one(name):
        seed = int(name[1:])
        subprocess.run(
            [nodecert, "run", "--simulate", "h100-sxm-8", "--node-name", name, "--seed", str(seed),
             "--out", os.path.join(root, name), "-q"],
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        list(ex.map(one, todo))
    return names


def peak_rss_of(cmd):
    """Run cmd; (seconds, its own peak RSS in MiB, as GNU time measures it)."""
    import tempfile
    with tempfile.NamedTemporaryFile("r") as out:
        t0 = time.perf_counter()
        r = subprocess.run(["/usr/bin/time", "-o", out.name, "-f", "%M", *cmd],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        kib = int(out.read().strip().splitlines()[-1])
    if r.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.decode()[-2000:]}")
    return dt, kib / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nodecert")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--dir", default="target/bench-fleet")
    a = ap.parse_args()
    nodes_dir = os.path.join(a.dir, "nodes")
    os.makedirs(nodes_dir, exist_ok=True)
    names = generate(a.nodecert, nodes_dir, a.nodes)
    files = [os.path.join(nodes_dir, x, "evidence.json") for x in names]
    size = sum(os.path.getsize(f) for f in files)
    print(f"{len(files)} nodes, {size / 1e6:.0f} MB of evidence ({size / len(files) / 1e6:.2f} MB a node)")

    # A quarter of the fleet, its folders given one by one: memory must not grow with the fleet.
    quarter = [os.path.join(nodes_dir, x) for x in names[: len(names) // 4]]
    t_q, rss_q = peak_rss_of([a.nodecert, "fleet", "report", *quarter, "--out", os.path.join(a.dir, "out-quarter")])

    t0 = time.perf_counter()
    for f in files:
        with open(f, "rb") as fh:
            json.load(fh)
    t_py = time.perf_counter() - t0

    t_nc, rss = peak_rss_of([a.nodecert, "fleet", "report", nodes_dir, "--out", os.path.join(a.dir, "out")])
    print(f"python json.load of every file: {t_py:.2f} s")
    print(f"nodecert fleet report:          {t_nc:.2f} s")
    print(f"ratio nodecert / json.load:     {t_nc / t_py:.2f} (goal <= 1.0)")
    print(f"peak memory: {rss_q:.0f} MiB for {len(quarter)} nodes ({t_q:.2f} s), {rss:.0f} MiB for {len(files)} nodes")


if __name__ == "__main__":
    main()
