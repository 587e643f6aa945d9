#!/usr/bin/env python3
"""PyTorch's GEMM rates at the shapes and precisions of nodecert's [checks.compute], on GPU 0,
timed as ../shared/bench/torch_anchor.py times (CUDA events around one GEMM, median of 10 after
3 warm-ups): the reference the compute check is held to (>= 0.97 of it) in the same call on the
GPU machine. Operands are integers in -r..r with r as nodecert's (src/backend/gemm_data.rs,
`range`: the widest whose every sum is exact in fp32, 45 at 8192). bf16 is also timed on -2..2
operands (the narrow data nodecert used before) and on torch.randn, to show how far the rate
depends on the data (on the lent H200, 2026-12-04: 791 TFLOP/s on -2..2, 827 on -45..45, 759 on
randn). Prints one JSON object.
"""
import json
import statistics
import sys

import torch


def timed(fn, reps=10, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
flops = 2 * n ** 3
out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "size": n}
# As gemm_data::range for fp32, TF32 and bf16: the largest r with r*r*n < 2^24, at most 127.
r = 2
while (r + 1) * (r + 1) * n < (1 << 24) and r < 127:
    r += 1
out["operand_range"] = r
a = torch.randint(-r, r + 1, (n, n), device="cuda").float()
b = torch.randint(-r, r + 1, (n, n), device="cuda").float()
torch.backends.cuda.matmul.allow_tf32 = False
out["fp32_TFLOPs"] = flops / timed(lambda: a @ b) / 1e12
torch.backends.cuda.matmul.allow_tf32 = True
out["tf32_TFLOPs"] = flops / timed(lambda: a @ b) / 1e12
torch.backends.cuda.matmul.allow_tf32 = False
ab, bb = a.bfloat16(), b.bfloat16()
out["bf16_TFLOPs"] = flops / timed(lambda: ab @ bb) / 1e12
# The data's share of the rate: the same bf16 GEMM on narrow integers and on randn.
for name, make in [("narrow", lambda: torch.randint(-2, 3, (n, n), device="cuda").float()),
                   ("randn", lambda: torch.randn((n, n), device="cuda"))]:
    x, y = make().bfloat16(), make().bfloat16()
    out[f"bf16_{name}_TFLOPs"] = flops / timed(lambda: x @ y) / 1e12
    del x, y
# nodecert's bf16 GEMM writes fp32 (exact products to check): the like-for-like figure.
try:
    out["bf16_fp32_out_TFLOPs"] = flops / timed(
        lambda: torch.mm(ab, bb, out_dtype=torch.float32)) / 1e12
except Exception as e:  # older PyTorch: no out_dtype
    out["bf16_fp32_out_error"] = repr(e)
try:
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
    one = torch.ones((), device="cuda")
    out["fp8_TFLOPs"] = flops / timed(
        lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)) / 1e12
except Exception as e:
    out["fp8_error"] = repr(e)
# fp8 as nodecert's GEMM (cuBLASLt, src/backend/cuda/lt.rs) runs it: e4m3 integers, fp32 output,
# unit scales, no fast accumulation. On -2..2 (nodecert's fp8 range) it is the like-for-like
# figure; -8..8 and -16..16 show whether wider operands stay exact (fp8 tensor cores accumulate
# in fewer bits than fp32 between cuBLASLt's promotions): the rate and the wrong elements against
# the fp32 product (exact here: every sum is below 2^24). nodecert keeps -2..2 until this says
# wider is exact.
try:
    torch.backends.cuda.matmul.allow_tf32 = False
    one = torch.ones((), device="cuda")
    for r8 in (2, 8, 16):
        q = torch.randint(-r8, r8 + 1, (n, n), device="cuda").float()
        p = torch.randint(-r8, r8 + 1, (n, n), device="cuda").float()
        q8, p8 = q.to(torch.float8_e4m3fn), p.to(torch.float8_e4m3fn).t().contiguous().t()
        run = lambda: torch._scaled_mm(q8, p8, scale_a=one, scale_b=one, out_dtype=torch.float32)
        out[f"fp8_r{r8}_TFLOPs"] = flops / timed(run) / 1e12
        out[f"fp8_r{r8}_wrong_elements"] = int((run() != q @ p).sum().item())
        if r8 == 2:
            out["fp8_fp32_out_TFLOPs"] = out["fp8_r2_TFLOPs"]
        del q, p, q8, p8
except Exception as e:
    out["fp8_fp32_out_error"] = repr(e)
print(json.dumps(out))
