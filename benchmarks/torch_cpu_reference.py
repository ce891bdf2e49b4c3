#!/usr/bin/python3
"""PyTorch CPU reference for momoe's CPU benchmarks: the same work, timed the same way.

  torch_cpu_reference.py layer --tokens T --d D --f F --experts E --top-k K [--threads N]
      one MoE layer forward + backward, the way a PyTorch user writes it: router GEMM, softmax,
      top-k, capacity 1.25 (tokens sorted by expert, the overflow dropped), one addmm per expert
      for each of the two expert matrices, ReLU, gate-weighted index_add combine.
  torch_cpu_reference.py train [--threads N] [--steps 5] [--warmup 1]
      a training step of the quick-start model (configs/quickstart.pbtxt): vocabulary 10000,
      d_model 128, 4 heads, sequences of 64, batch 16, blocks "sgsmsm" (post-LN attention, then
      an SMoE or MomentumSMoE sublayer of 8 experts, top-2, d_expert 128, capacity 1.25), dropout
      0.1, AdamW, clipping at 1.0.

Prints one JSON line like momoe-bench (median over --iterations of fwd+bwd for the layer;
tokens/s over --steps for training). Debian's python3-torch (OpenBLAS) is what
benchmarks/torch_compare.sh installs and runs; nothing here is needed to build or test momoe.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


def capacity_of(tokens, k, experts, factor=1.25):
    return max(1, math.ceil(factor * tokens * k / experts))


class MoE(torch.nn.Module):
    """Top-k softmax routing with capacity: sorted tokens, one addmm per expert."""

    def __init__(self, d, f, experts, k):
        super().__init__()
        self.k, self.experts = k, experts
        self.router = torch.nn.Linear(d, experts, bias=False)
        # One parameter per expert matrix (indexing a stacked [E, D, F] tensor would make every
        # expert's backward write a zero-filled [E, D, F] gradient).
        def params(*shape, std):
            return torch.nn.ParameterList(
                torch.nn.Parameter(torch.randn(*shape) * std) for _ in range(experts))
        self.w1, self.b1 = params(d, f, std=0.05), params(f, std=0.0)
        self.w2, self.b2 = params(f, d, std=0.05), params(d, std=0.0)

    def forward(self, x):
        t, d = x.shape
        probs = F.softmax(self.router(x), dim=-1)
        gate, idx = probs.topk(self.k, dim=-1)  # [T, K]
        flat_e = idx.reshape(-1)
        # Assignments grouped by expert (token order inside each); the first `cap` of each kept.
        order = torch.argsort(flat_e, stable=True)
        counts = torch.bincount(flat_e, minlength=self.experts)
        starts = torch.cumsum(counts, 0) - counts
        position = torch.arange(flat_e.numel()) - starts[flat_e[order]]
        cap = capacity_of(t, self.k, self.experts)
        kept = order[position < cap]
        tok = kept // self.k
        xs = x.index_select(0, tok)  # one gather; its backward is one index_add
        sizes = torch.clamp(counts, max=cap).tolist()
        ys = []
        for e, chunk in enumerate(xs.split(sizes)):
            if chunk.shape[0] > 0:
                h = torch.relu(torch.addmm(self.b1[e], chunk, self.w1[e]))
                ys.append(torch.addmm(self.b2[e], h, self.w2[e]))
        y = torch.cat(ys) * gate.reshape(-1)[kept].unsqueeze(1)
        out = torch.zeros_like(x).index_add(0, tok, y)
        # load-balancing loss (Switch): E * sum_e frac_e * mean prob_e
        frac = torch.bincount(flat_e, minlength=self.experts).float() / flat_e.numel()
        balance = self.experts * (frac * probs.mean(0)).sum()
        return out, balance


def time_layer(args):
    torch.manual_seed(1)
    layer = MoE(args.d, args.f, args.experts, args.top_k)
    x = torch.randn(args.tokens, args.d, requires_grad=True)
    seed = torch.randn(args.tokens, args.d)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out, balance = layer(x)
        ((out * seed).sum() + 0.01 * balance).backward()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"bench": "torch_layer", "tokens": args.tokens, "d": args.d, "f": args.f,
            "experts": args.experts, "top_k": args.top_k, "threads": torch.get_num_threads(),
            "fwd_bwd_ms": med * 1e3, "tokens_per_second": args.tokens / med}


class Block(torch.nn.Module):
    """momoe's post-LN double-residual block: h = LN1(h + drop(Attn(h))), then the MoE
    sublayer h = LN2(h + LN_in(z)) with z = x + u (SMoE) or x + gamma p, p = mu p + u
    (MomentumSMoE)."""

    def __init__(self, d, heads, f, experts, k, momentum, dropout):
        super().__init__()
        self.heads, self.momentum, self.dropout = heads, momentum, dropout
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln1, self.ln2, self.ln_in = (torch.nn.LayerNorm(d) for _ in range(3))
        self.moe = MoE(d, f, experts, k)

    def forward(self, h, p, batch, seq):
        d = h.shape[-1]
        q, k, v = self.qkv(h).view(batch, seq, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        a = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        a = self.proj(a.transpose(1, 2).reshape(batch * seq, d))
        h = self.ln1(h + F.dropout(a, self.dropout, self.training))
        u, balance = self.moe(h)
        u = F.dropout(u, self.dropout, self.training)
        if self.momentum:
            p = 0.7 * p + u if p is not None else u
            z = h + 1.0 * p
        else:
            z = h + u
        return self.ln2(h + self.ln_in(z)), p, balance


class QuickstartLM(torch.nn.Module):
    def __init__(self, vocab=10000, d=128, heads=4, seq=64, arch="gmm"):
        super().__init__()
        self.seq = seq
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.zeros(seq, d))
        self.blocks = torch.nn.ModuleList(
            Block(d, heads, d, 8, 2, c == "m", 0.1) for c in arch)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids, targets):
        batch = ids.shape[0]
        h = F.dropout(self.embed(ids) + self.pos, 0.1, self.training).reshape(batch * self.seq, -1)
        p, aux = None, 0.0
        for blk in self.blocks:
            h, p, balance = blk(h, p, batch, self.seq)
            aux = aux + balance
        return F.cross_entropy(self.head(h), targets.reshape(-1)) + 0.01 * aux


def time_train(args):
    torch.manual_seed(1)
    model = QuickstartLM()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    batch, seq, vocab = 16, 64, 10000
    gen = torch.Generator().manual_seed(2)
    model.train()

    def step():
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        targets = torch.randint(0, vocab, (batch, seq), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - t0
    return {"bench": "torch_train", "preset": "quickstart", "threads": torch.get_num_threads(),
            "step_seconds": seconds / args.steps,
            "tokens_per_second": batch * seq * args.steps / seconds}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["layer", "train"])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--d", type=int, default=352)
    ap.add_argument("--f", type=int, default=352)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    else:
        import os
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    result = time_layer(args) if args.what == "layer" else time_train(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
