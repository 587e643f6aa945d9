# The reference MLP of nodecert's training check partitioned the ways the check compares,
# written in PyTorch: the figure each partitioning's step time is held against (issue 17: within
# 1.1x of the same partitioning in PyTorch, measured in the same session).
#
#   torchrun --standalone --nproc_per_node=N ci/torch_partition.py METHOD [LAYERS] [BATCH] [PRECISION]
#
# METHOD: data | tensor | hybrid2 | hybrid4 (tensor-parallel groups of 2 or 4, data-parallel
# across them). LAYERS default 1024,4096,4096,10; BATCH (samples per data-parallel group, as
# checks.training.batch) default 8192. PRECISION: fp32 (default: TF32 off, as the suite's default
# run); bf16, nodecert's recipe and the reference its bf16 step is held to: every GEMM multiplies
# bf16 copies of its operands (weights, activations, output gradients) and writes fp32
# (torch.mm(..., out_dtype=torch.float32)), while bias, ReLU, softmax, loss, gradients and the
# update stay fp32 on fp32 master weights; or autocast, PyTorch's usual mixed precision
# (torch.autocast to bfloat16: bf16 activations, half the bytes in the memory-bound kernels),
# printed for comparison, not a like-for-like reference. Plain SGD in every case.
# Tensor parallelism is Megatron's: layers alternate column-parallel (output features split) and
# row-parallel (input features split, the partial outputs all-reduced before the bias); an odd
# last layer is whole on every rank; the input gradient of a column-parallel layer (not the
# first) is all-reduced in the backward pass. The data-parallel run is DistributedDataParallel
# (25 MiB buckets overlapped with the backward pass, as nodecert's); a hybrid's data-parallel
# all-reduce runs after the backward pass, not overlapped, so that figure errs slow. Rank 0
# prints one JSON line: the method, the layout, and the slowest rank's median step time over 20
# timed steps after 5 warm-up steps.
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

method = sys.argv[1] if len(sys.argv) > 1 else "data"
layers = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1024,4096,4096,10").split(",")]
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
if precision not in ("fp32", "bf16", "autocast"):
    raise SystemExit(f"precision {precision!r}: fp32, bf16 or autocast")

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", rank))
torch.cuda.set_device(local)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

tp = {"data": 1, "tensor": world, "hybrid2": 2, "hybrid4": 4}[method]
if world % tp or (method.startswith("hybrid") and world // tp < 2):
    raise SystemExit(f"{method} needs a multiple of {tp} GPUs and two groups; {world} here")
dp = world // tp
group_of, t = rank // tp, rank % tp
# Every rank makes every group, in the same order (torch.distributed requires it).
tp_groups = [dist.new_group(list(range(g * tp, (g + 1) * tp))) for g in range(dp)] if tp > 1 else []
dp_groups = [dist.new_group(list(range(i, world, tp))) for i in range(tp)] if dp > 1 else []
tp_group = tp_groups[group_of] if tp > 1 else None
dp_group = dp_groups[t] if dp > 1 else None


class ReduceForward(torch.autograd.Function):
    """All-reduce over the tensor-parallel group forward; the gradient passes through."""

    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(x, group=tp_group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class ReduceBackward(torch.autograd.Function):
    """Identity forward; the gradient is all-reduced over the tensor-parallel group."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g, group=tp_group)
        return g


class Bf16Linear(torch.autograd.Function):
    """x·wᵀ as nodecert's bf16 run computes it: bf16 copies of x and w into a GEMM that
    accumulates and writes fp32; backward, the same with a bf16 copy of the output gradient."""

    @staticmethod
    def forward(ctx, x, w):
        xb, wb = x.bfloat16(), w.bfloat16()
        ctx.save_for_backward(xb, wb)
        return torch.mm(xb, wb.t(), out_dtype=torch.float32)

    @staticmethod
    def backward(ctx, gy):
        xb, wb = ctx.saved_tensors
        gb = gy.bfloat16()
        # The first layer's input gradient is not needed (nodecert does not compute it either).
        gx = torch.mm(gb, wb, out_dtype=torch.float32) if ctx.needs_input_grad[0] else None
        return gx, torch.mm(gb.t(), xb, out_dtype=torch.float32)


def matmul_t(h, w):
    """h·wᵀ in the run's precision."""
    return Bf16Linear.apply(h, w) if precision == "bf16" else h @ w.t()


class Linear(torch.nn.Linear):
    """nn.Linear, its product nodecert's bf16 GEMM in a bf16 run (the bias added in fp32)."""

    def forward(self, h):
        if precision == "bf16":
            return Bf16Linear.apply(h, self.weight) + self.bias
        return super().forward(h)


depth = len(layers) - 1


def split(l):
    """How layer l is divided: 'col', 'row' or 'whole' (as nodecert's training::partition)."""
    if tp == 1:
        return "whole"
    pairs = depth // 2 * 2
    if l >= pairs:
        return "whole"
    return "col" if l % 2 == 0 else "row"


torch.manual_seed(0)
weights, biases = [], []
for l in range(depth):
    din, dout = layers[l], layers[l + 1]
    s = split(l)
    if s == "col":
        dout //= tp
    elif s == "row":
        din //= tp
    w = (torch.randn(dout, din, device="cuda") * (2.0 / layers[l]) ** 0.5).requires_grad_()
    b = torch.zeros(dout, device="cuda", requires_grad=True)
    weights.append(w)
    biases.append(b)
params = weights + biases
ddp = None
if method == "data":
    mods = []
    for l in range(depth):
        mods.append(Linear(layers[l], layers[l + 1]))
        if l + 1 < depth:
            mods.append(torch.nn.ReLU())
    ddp = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(*mods).cuda(), device_ids=[local], bucket_cap_mb=25
    )
    params = list(ddp.parameters())
opt = torch.optim.SGD(params, lr=0.02)
x = torch.randn(batch, layers[0], device="cuda")
y = torch.randint(0, layers[-1], (batch,), device="cuda")


def forward(h):
    for l in range(depth):
        s = split(l)
        if s == "col" and l > 0:
            h = ReduceBackward.apply(h)
        if s == "row":
            h = ReduceForward.apply(matmul_t(h, weights[l])) + biases[l]
        else:
            h = matmul_t(h, weights[l]) + biases[l]
        if l + 1 < depth:
            h = torch.relu(h)
    return h


def step():
    opt.zero_grad(set_to_none=False)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "autocast"):
        if ddp is not None:
            # DDP averages the gradients over the replicas itself.
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
        else:
            loss = torch.nn.functional.cross_entropy(forward(x), y, reduction="sum") / (batch * dp)
    loss.backward()
    if ddp is not None:
        opt.step()
        return
    if dp > 1:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, group=dp_group)
        at = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[at : at + n].view_as(p))
            at += n
    opt.step()


for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(20):
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    step()
    b.record()
    torch.cuda.synchronize()
    times.append(a.elapsed_time(b))
# The step of the slowest rank, as nodecert reports it.
t_med = torch.tensor([statistics.median(times)], device="cuda")
dist.all_reduce(t_med, op=dist.ReduceOp.MAX)
if rank == 0:
    print(json.dumps({"method": method, "gpus": world, "tp": tp, "dp": dp, "layers": layers,
                      "batch_per_group": batch, "precision": precision,
                      "step_ms": round(t_med.item(), 3),
                      "torch": torch.__version__}))
dist.destroy_process_group()
