#!/usr/bin/python3
"""PyTorch reference for momoe-bench layer on a GPU: the strongest plain-PyTorch MoE layer.

  torch_moe_reference.py layer --tokens T --d D --f F --experts E --top-k K
                               [--activation relu|gelu] [--dtype bf16|f32] [--device cuda|cpu]
                               [--impl auto|grouped|loop] [--iterations 20] [--warmup 5] [--check]
                               [--check-tokens 256] [--threads N]
      one dropless MoE layer forward + backward: router GEMM, softmax, top-k, the assignments
      sorted by expert, the experts as grouped GEMMs (torch._grouped_mm, one call per expert
      matrix; --impl loop: one matmul per expert), the activation, gate-weighted index_add_
      combine, and autograd's backward. Timed with CUDA events (wall clock on the CPU): median
      of --iterations after --warmup.
      --check first runs, on the first --check-tokens tokens (default 256): the layer in f32
      (one matmul per expert) against a per-token reference (each token through its K experts
      one by one), output and input, router and expert gradients within float32's rounding
      bound in relative L2 (logic_bound: 8 u sqrt(D + F + tokens), u = 2^-24); and
      with the grouped impl, torch._grouped_mm against one matmul per expert in the same dtype
      within 1e-2; and that the layer chose each token's top K experts. It fails (exit 1,
      naming the tensor) above either bound: the choice, sorting, grouping, gates and combine
      are right before they are timed.

Prints one JSON line. momoe-bench layer --torch runs it in the same run as momoe's layer, on the
same shape, dtype and device (issue 21). Nothing here is needed to build or test momoe; the test
(tests/benchmarks/torch_moe_reference_test.sh) runs --check on the CPU with small shapes.
The timed step is forward, then backward from a fixed output gradient; momoe's layer does more
work per step than this one (router and expert biases, the balance loss, f32 router and weight
gradients), so the speed-up it reports is conservative for momoe.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def has_grouped_mm():
    return hasattr(torch, "_grouped_mm")


class MoE(torch.nn.Module):
    """Top-k softmax routing without capacity; experts as stacked [E, D, F] and [E, F, D]."""

    def __init__(self, d, f, experts, k, activation, impl, dtype, device):
        super().__init__()
        self.k, self.experts, self.impl = k, experts, impl
        self.act = torch.relu if activation == "relu" else F.gelu
        g = torch.Generator(device="cpu").manual_seed(1)

        def param(*shape, std):
            return torch.nn.Parameter((torch.randn(*shape, generator=g) * std).to(device, dtype))

        self.router = param(d, experts, std=0.05)
        self.w1 = param(experts, d, f, std=0.05)
        self.w2 = param(experts, f, d, std=0.05)

    def experts_forward(self, xs, counts):
        """xs: [A, D] sorted by expert, counts: [E] (int64). Returns [A, D]."""
        if self.impl == "grouped":
            offs = torch.cumsum(counts, 0).to(torch.int32)
            h = self.act(torch._grouped_mm(xs, self.w1, offs=offs))
            return torch._grouped_mm(h, self.w2, offs=offs)
        # unbind once: indexing w1[e] per expert would make autograd write E zero-filled
        # [E, D, F] gradients per step; unbind's backward writes each expert's slice once.
        w1s, w2s = self.w1.unbind(0), self.w2.unbind(0)
        ys = []
        for e, chunk in enumerate(xs.split(counts.tolist())):
            if chunk.shape[0] > 0:
                ys.append(self.act(chunk @ w1s[e]) @ w2s[e])
        return torch.cat(ys)

    def forward(self, x):
        probs = F.softmax((x @ self.router).float(), dim=-1)
        gate, idx = probs.topk(self.k, dim=-1)  # [T, K]
        self.last_choice = idx.detach()
        flat_e = idx.reshape(-1)
        order = torch.argsort(flat_e, stable=True)  # assignments grouped by expert
        counts = torch.bincount(flat_e, minlength=self.experts)
        tok = order // self.k
        y = self.experts_forward(x.index_select(0, tok), counts)
        y = y * gate.reshape(-1)[order].unsqueeze(1).to(y.dtype)
        return torch.zeros_like(x).index_add_(0, tok, y)

    def reference(self, x, router, w1, w2, idx):
        """Each token through its K experts one by one (no sorting, no grouping), with the given
        parameters (leaves of their own, so their gradients are the reference's). `idx` is the
        layer's choice of experts: it must be the top K of the reference's probabilities (as a
        set per token; the order of the K inside it is the layer's)."""
        probs = F.softmax(x @ router, dim=-1)
        own = probs.topk(self.k, dim=-1).indices
        if not torch.equal(own.sort(dim=-1).values, idx.sort(dim=-1).values):
            bad = int((own.sort(dim=-1).values != idx.sort(dim=-1).values).any(-1).sum())
            raise SystemExit(f"torch_moe_reference: --check failed: the layer chose other experts "
                             f"than the top {self.k} for {bad} tokens")
        gate = probs.gather(1, idx)
        w1s, w2s = w1.unbind(0), w2.unbind(0)
        rows = []
        for t in range(x.shape[0]):
            acc = torch.zeros_like(x[t])
            for j in range(self.k):
                e = int(idx[t, j])
                acc = acc + (self.act(x[t] @ w1s[e]) @ w2s[e]) * gate[t, j]
            rows.append(acc)
        return torch.stack(rows)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, iterations, warmup, device):
    """Median seconds of fn() over `iterations` runs after `warmup`."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iterations):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def layer_results(layer, x, seed):
    """The layer's output and its input, router and expert gradients for a loss sum(out * seed)."""
    layer.zero_grad(set_to_none=True)
    xi = x.detach().clone().requires_grad_(True)
    out = layer(xi)
    (out.float() * seed).sum().backward()
    results = [out.detach(), xi.grad, layer.router.grad, layer.w1.grad, layer.w2.grad]
    layer.zero_grad(set_to_none=True)
    return results


def compare(got, want, bound, what):
    """Worst relative L2 error ||a - b|| / ||b|| over the five tensors; raises above bound."""
    worst = 0.0
    for name, a, b in zip(["output", "d_input", "d_router", "d_w1", "d_w2"], got, want):
        a, b = a.float(), b.float()
        err = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
        worst = max(worst, err)
        if not err <= bound:
            raise SystemExit(f"torch_moe_reference: --check failed: {name} relative error "
                             f"{err:.3g} > {bound:g} ({what})")
    return worst


def logic_bound(d, f, tokens):
    """The f32 loop layer against the per-token reference: the same products summed in other
    orders. Each rounding is at most u = 2^-24 of its partial sum, which for zero-mean operands
    grows as sqrt(k); the roundings are independent, so a K-term sum's error is about
    u sqrt(K / 2) of its value. A tensor of the check goes through sums over D (fc1, the router),
    F (fc2) and the tokens (the weight gradients, at most all of them): 8 standard deviations of
    u sqrt(D + F + tokens) bound its relative L2 error. A logic error (a wrong token, gate or
    expert) is O(1)."""
    return 8 * 2.0 ** -24 * math.sqrt(d + f + tokens)


def check_layer(args, layer, x, seed):
    """1. The layer's logic (sorting, grouping, gates, combine) in f32 with the loop impl against
    a per-token reference on the same weights: logic_bound. 2. With the grouped impl (a GPU, bf16):
    torch._grouped_mm against one matmul per expert in the same dtype, on the same values: they
    differ only in the GEMMs' accumulation order (1e-2). Returns the worst error of each."""
    torch.backends.cuda.matmul.allow_tf32 = False  # the bound is float32's: no TF32 GEMMs
    f32 = MoE(args.d, args.f, args.experts, args.top_k, args.activation, "loop", torch.float32,
              args.device)  # the same draws: the same weights before rounding
    xf = x.detach().float()
    got = layer_results(f32, xf, seed)
    leaves = [t.detach().clone().requires_grad_(True) for t in (xf, f32.router, f32.w1, f32.w2)]
    ref_out = f32.reference(*leaves, f32.last_choice)
    (ref_out * seed).sum().backward()
    bound = logic_bound(args.d, args.f, xf.shape[0])
    errors = {"check_logic_bound": bound,
              "check_logic_rel_error": compare(got, [ref_out.detach()] + [t.grad for t in leaves],
                                               bound, "f32 loop vs per-token reference")}
    if layer.impl == "grouped":
        grouped = layer_results(layer, x, seed)
        layer.impl = "loop"
        try:
            loop = layer_results(layer, x, seed)
        finally:
            layer.impl = "grouped"
        errors["check_grouped_rel_error"] = compare(grouped, loop, 1e-2,
                                                    f"{args.dtype} grouped vs loop")
    return errors


def run_layer(args):
    device, dtype = args.device, DTYPES[args.dtype]
    impl = args.impl
    aligned = args.d % 8 == 0 and args.f % 8 == 0  # _grouped_mm's 16-byte strides in bf16
    if impl == "auto":
        impl = "grouped" if device == "cuda" and dtype == torch.bfloat16 and has_grouped_mm() \
            and aligned else "loop"
    if impl == "grouped" and not aligned:
        raise SystemExit("torch_moe_reference: --impl grouped needs --d and --f multiples of 8")
    if impl == "grouped" and not has_grouped_mm():
        raise SystemExit(f"torch_moe_reference: torch {torch.__version__} has no _grouped_mm")
    layer = MoE(args.d, args.f, args.experts, args.top_k, args.activation, impl, dtype, device)
    g = torch.Generator(device="cpu").manual_seed(2)
    x = torch.randn(args.tokens, args.d, generator=g).to(device, dtype).requires_grad_(True)
    seed = torch.randn(args.tokens, args.d, generator=g).to(device)
    d_out = seed.to(dtype)  # the timed backward's output gradient (momoe's benchmark has one too)
    result = {"bench": "torch_layer", "torch": torch.__version__, "device": device,
              "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "impl": impl, "dtype": args.dtype, "activation": args.activation,
              "tokens": args.tokens, "d": args.d, "f": args.f, "experts": args.experts,
              "top_k": args.top_k}
    if args.check:  # on the first --check-tokens tokens: the per-token reference is slow
        n = min(args.tokens, args.check_tokens)
        result["check_tokens"] = n
        result.update(check_layer(args, layer, x[:n], seed[:n]))

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out = layer(x)
        out.backward(d_out)
        return out

    seconds = timed(step, args.iterations, args.warmup, device)
    out = step()
    if not (torch.isfinite(out).all() and torch.isfinite(x.grad).all()):
        raise SystemExit("torch_moe_reference: the timed layer's output or gradient is not finite")
    flops = 3.0 * args.tokens * (2.0 * args.top_k * 2.0 * args.d * args.f +
                                 2.0 * args.d * args.experts)
    result.update({"iterations": args.iterations, "fwd_bwd_ms": seconds * 1e3,
                   "tokens_per_second": args.tokens / seconds,
                   "tflops_per_second": flops / seconds / 1e12})
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["layer"])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--f", type=int, default=4096)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--impl", choices=["auto", "grouped", "loop"], default="auto")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--check-tokens", type=int, default=256)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_moe_reference: --device cuda, but torch sees no GPU")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.iterations < 1 or args.warmup < 0:
        raise SystemExit("torch_moe_reference: --iterations must be >= 1 and --warmup >= 0")
    result = run_layer(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
