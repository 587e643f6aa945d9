#!/usr/bin/env python3
"""The training check's loss trajectory, computed fast on a CPU: for choosing a suite's lr, steps
and loss_target without a GPU.

nodecert's CPU reference (src/training/reference.rs) sums in a fixed order so that it reproduces
the GPU's golden run; that makes it slow (minutes per step for the suites' large models). This
is the same computation in numpy: the same data (splitmix64-hashed features, the sparse integer
teacher's labels), the same initial weights, forward, softmax cross-entropy, backward and SGD, in
float32 with BLAS sums. It does not match bit for bit, but early losses agree to about 1e-5 and
the trajectory is the same.

  python3 ci/loss_trajectory.py LAYERS GLOBAL_BATCH STEPS LR [SEED]
      e.g. 1024,4096,4096,10 8192 150 0.02  (GLOBAL_BATCH = batch per GPU x GPUs)
  python3 ci/loss_trajectory.py --check NODECERT_BINARY
      trains the golden configuration and compares with the CPU golden losses that
      `nodecert run --simulate h200-vm-1` records: exits 1 if they differ by more than 1e-4.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

GAMMA = np.uint64(0x9E3779B97F4A7C15)
DOMAIN_FEATURE = np.uint64(0x6E63666561740001)
DOMAIN_TEACHER = np.uint64(0x6E63746561630002)
DOMAIN_PARAM = np.uint64(0x6E63706172610003)


def mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash4(domain, seed, a, b, c):
    with np.errstate(over="ignore"):
        h = np.uint64(domain)
        for w in (seed, a, b, c):
            h = mix64((h + GAMMA) ^ np.asarray(w, dtype=np.uint64))
    return h


def centred_int24(h):
    return (h >> np.uint64(40)).astype(np.int64) - (1 << 23)


def teacher(seed, in_dim, classes):
    c = np.arange(classes, dtype=np.uint64)[:, None]
    f = np.arange(in_dim, dtype=np.uint64)[None, :]
    h = hash4(DOMAIN_TEACHER, np.uint64(seed), c, f, np.uint64(0))
    w = (h >> np.uint64(60)).astype(np.int64) - 8
    w[((h >> np.uint64(32)) & np.uint64(0xF)) != 0] = 0
    return w


def batch(seed, step, samples, in_dim, t):
    s = np.arange(samples, dtype=np.uint64)[:, None]
    f = np.arange(in_dim, dtype=np.uint64)[None, :]
    k = centred_int24(hash4(DOMAIN_FEATURE, np.uint64(seed), np.uint64(step), s, f))
    # Exact in float64: every partial sum stays below 2^53. argmax keeps the lowest class on ties.
    y = np.argmax(k.astype(np.float64) @ t.T.astype(np.float64), axis=1)
    return k.astype(np.float32) * np.float32(1.0 / 8388608.0), y


def init(seed, layers):
    params = []
    for l in range(len(layers) - 1):
        fan_in, out = layers[l], layers[l + 1]
        idx = np.arange(fan_in * out, dtype=np.uint64)
        u = centred_int24(hash4(DOMAIN_PARAM, np.uint64(seed), np.uint64(l), idx, np.uint64(0)))
        scale = np.sqrt(np.float32(6.0) / np.float32(fan_in)).astype(np.float32)
        params.append((u.astype(np.float32) * np.float32(1.0 / 8388608.0) * scale).reshape(out, fan_in))
        params.append(np.zeros(out, np.float32))
    return params


def train(layers, global_batch, steps, lr, seed=0, log=None):
    t = teacher(seed, layers[0], layers[-1])
    params = init(seed, layers)
    lr = np.float32(lr)
    depth = len(layers) - 1
    rows = np.arange(global_batch)
    losses = []
    for step in range(steps):
        t0 = time.time()
        x, y = batch(seed, step, global_batch, layers[0], t)
        acts = [x]
        for l in range(depth):
            z = acts[-1] @ params[2 * l].T + params[2 * l + 1]
            acts.append(np.maximum(z, 0) if l + 1 < depth else z)
        z = acts[-1]
        m = z.max(1, keepdims=True)
        e = np.exp(z - m)
        s = e.sum(1, keepdims=True)
        losses.append(float(np.mean(np.log(s[:, 0]) - (z[rows, y] - m[:, 0]))))
        dy = e / s
        dy[rows, y] -= 1
        dy = (dy / np.float32(global_batch)).astype(np.float32)
        for l in reversed(range(depth)):
            gw, gb = dy.T @ acts[l], dy.sum(0)
            if l > 0:
                dx = dy @ params[2 * l]
                dx[acts[l] <= 0] = 0
            params[2 * l] -= lr * gw
            params[2 * l + 1] -= lr * gb
            if l > 0:
                dy = dx
        if log:
            log(f"step {step:4} loss {losses[-1]:.5f} ({time.time() - t0:.1f} s)")
    return losses


def check(binary):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            [binary, "run", "--simulate", "h200-vm-1", "--out", d, "-q"],
            check=False, stdout=subprocess.DEVNULL,
        )
        with open(os.path.join(d, "evidence.json")) as f:
            ev = json.load(f)
    training = next(c for c in ev["checks"] if c["id"] == "training")
    golden = next(m for m in training["metrics"] if m["name"] == "golden_cpu_loss")["samples"]
    # The suite's golden configuration (suite defaults): [64, 128, 128, 10], batch 256, lr 0.5.
    ours = train([64, 128, 128, 10], 256, len(golden), 0.5)
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, golden))
    print(f"numpy replica against nodecert's CPU golden losses ({len(golden)} steps): "
          f"largest relative difference {worst:.1e}")
    return 0 if worst < 1e-4 else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        return check(argv[2])
    if len(argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        return 2
    layers = [int(v) for v in argv[1].split(",")]
    global_batch, steps, lr = int(argv[2]), int(argv[3]), float(argv[4])
    seed = int(argv[5]) if len(argv) == 6 else 0
    print(f"layers {layers}, global batch {global_batch}, {steps} steps, lr {lr}, seed {seed}")
    losses = train(layers, global_batch, steps, lr, seed, log=lambda s: print(s, flush=True))
    print(f"first {losses[0]:.4f}, last {losses[-1]:.4f}, min {min(losses):.4f}, "
          f"ln(classes) {np.log(layers[-1]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
