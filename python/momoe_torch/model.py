"""The momoe transformer language model in plain PyTorch, built from a `momoe-export` folder.

It computes what momoe's forward pass computes with training off (docs/export_format.md): the
same block structure (post-LN double residual or pre-LN; LayerNorm or RMSNorm; learned or rotary
positions; ReLU, GELU or SwiGLU FFNs, with or without biases), top-k softmax or sigmoid routing
(renormalised or not, scaled, group-limited, loss-free balancing's bias, shared experts) or
SparseMixer routing
(argmax at evaluation), the Adaptive Clustering router's per-batch metric, the momentum / Adam /
robust residual dynamics threaded through the MoE layers, and an evaluation capacity when the
model has one. Ties between router logits go to the lowest expert index, as in momoe.

The residual coefficients are derived here from each block's "dynamics" (the papers' mu, gamma,
rho, L, m, Adam settings and sign convention; dynamics.py), not read from momoe's "residual"
numbers, which are only cross-checked.

Nothing here depends on momoe: config.json and model.safetensors (read with numpy) are enough.
"""

import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from .dynamics import check_residual, residual_coefficients
from .safetensors_numpy import read_safetensors

FORMAT = "momoe-export"
FORMAT_VERSION = 1


def _activation(name):
    if name == "swiglu":
        return None  # gated: FeedForward splits fc1's output into [gate | up]
    if name == "relu":
        return F.relu
    if name == "gelu":
        return F.gelu  # the exact (erf) form
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    raise ValueError(f"unknown activation {name!r}")


def _first_max(x):
    """Row-wise argmax, the lowest index on ties (momoe's rule; a stable descending sort)."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., 0]


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dimension (transformers' LlamaRMSNorm)."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rstd * self.weight


def _norm(cfg, d):
    """The model's normalisation: LayerNorm (default) or RMSNorm, with its eps."""
    eps = float(cfg.get("norm_eps", cfg["layer_norm_eps"]))
    if cfg.get("norm", "layer_norm") == "rms_norm":
        return RMSNorm(d, eps)
    return nn.LayerNorm(d, eps=eps)


def rope(t, base):
    """Rotary embeddings on t [B, H, S, Dh] at positions 0..S-1, pairing dims (i, i + Dh/2)
    (transformers' rotate_half); angles, cos and sin in float64, as momoe computes them."""
    s, dh = t.shape[-2], t.shape[-1]
    half = dh // 2
    inv_freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64, device=t.device) / dh)
    angle = torch.arange(s, dtype=torch.float64, device=t.device)[:, None] * inv_freq[None]
    cos = torch.cat([angle.cos(), angle.cos()], dim=-1).to(t.dtype)
    sin = torch.cat([angle.sin(), angle.sin()], dim=-1).to(t.dtype)
    rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
    return t * cos + rotated * sin


class Attention(nn.Module):
    """Causal multi-head self-attention; qkv columns [q | k | v], head h owns columns h*Dh..;
    each head's q and k normalised by RMSNorm over its Dh columns when `qk_norm_eps` is given
    (Qwen3-MoE), then rotary embeddings on q and k when `rope_base` is given."""

    def __init__(self, d_model, n_heads, bias=True, rope_base=None, qk_norm_eps=None):
        super().__init__()
        self.n_heads = n_heads
        self.rope_base = rope_base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(d_model // n_heads, qk_norm_eps)
            self.k_norm = RMSNorm(d_model // n_heads, qk_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x):
        b, s, d = x.shape
        h = self.n_heads
        dh = d // h
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, h, dh).transpose(1, 2) for t in (q, k, v))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_base is not None:
            q, k = rope(q, self.rope_base), rope(k, self.rope_base)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ v
        return self.out(ctx.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    """fc2(act(fc1(x))); SwiGLU: fc1 is [2F, D], rows [gate | up], h = silu(gate) * up.
    The dense FFN, each expert, and the shared experts (one FFN of their summed width)."""

    def __init__(self, d_model, d_hidden, activation, bias=True):
        super().__init__()
        self.gated = activation == "swiglu"
        self.fc1 = nn.Linear(d_model, (2 if self.gated else 1) * d_hidden, bias=bias)
        self.fc2 = nn.Linear(d_hidden, d_model, bias=bias)
        self.act = _activation(activation)

    def forward(self, x):
        a = self.fc1(x)
        if self.gated:
            gate, up = a.chunk(2, dim=-1)
            return self.fc2(F.silu(gate) * up)
        return self.fc2(self.act(a))


def ac_metric(y, labels, num_experts, params):
    """The Adaptive Clustering router's metric [E, D] from this batch's MoE input `y` [T, D]
    grouped by the previous layer's top-1 expert `labels` [T] (momoe's kernels/cpu/
    router_math.h ac_metric, in float64)."""
    t, d = y.shape
    yd = y.double()
    counts = torch.bincount(labels, minlength=num_experts)
    sums = torch.zeros(num_experts, d, dtype=torch.float64, device=y.device).index_add_(0, labels, yd)
    inv = 1.0 / counts.clamp(min=1).double()
    mean = sums * inv[:, None]
    abs_dev = torch.zeros_like(sums).index_add_(0, labels, (yd - mean[labels]).abs())
    active = counts >= int(params["min_cluster_size"])
    mad = torch.where(counts[:, None] > 0, abs_dev / counts.clamp(min=1).double()[:, None],
                      torch.zeros_like(abs_dev))
    w = torch.ones_like(sums)
    w[active] = 1.0 / (mad[active] + float(params["eps"]))
    if params["normalization"] == "paper":
        # Each active cluster's weights have mean 1 over the D features (Lemma 1).
        rows = w[active]
        w[active] = rows * (float(d) / rows.sum(dim=1, keepdim=True))
    else:
        # Clip at clip_mult x the mean, then each feature has mean 1 over the active clusters.
        n_active = int(active.sum())
        if n_active > 0:
            rows = w[active]
            cap = float(params["clip_mult"]) * (rows.sum() / (n_active * d))
            rows = torch.minimum(rows, cap)
            col = rows.sum(dim=0, keepdim=True) / n_active
            w[active] = rows / col
    return w.to(y.dtype)


class MoeLayer(nn.Module):
    """One MoE sublayer: router, experts and residual dynamics, on tokens [T, D]."""

    def __init__(self, d_model, cfg, moe_index=0, where="moe", cross_check=True, bias=True):
        super().__init__()
        self.cfg = cfg
        self.moe_index = moe_index  # 0 for the model's first MoE layer
        # The residual dynamics' coefficients, by the papers' equations from "dynamics"; momoe's
        # own ("residual", when exported) must agree (cross_check).
        self.res = residual_coefficients(cfg["dynamics"], where + ".dynamics")
        if cross_check and "residual" in cfg:
            check_residual(self.res, cfg["dynamics"], cfg["residual"], where)
        self.num_experts = int(cfg["num_experts"])
        self.top_k = int(cfg["top_k"])
        self.router = nn.Linear(d_model, self.num_experts, bias=bias)
        self.experts = nn.ModuleList(
            FeedForward(d_model, int(cfg["d_expert"]), cfg["activation"], bias)
            for _ in range(self.num_experts)
        )
        # Routing of current models (absent keys: momoe's earlier exports, softmax top-k).
        self.score_function = cfg.get("score_function", "softmax")
        self.renormalize = bool(cfg.get("renormalize", True))
        self.routed_scaling = float(cfg.get("routed_scaling", 1.0))
        self.expert_groups = int(cfg.get("expert_groups", 1))
        self.topk_groups = int(cfg.get("topk_groups", self.expert_groups))
        # A group's score sums its `group_top` best keys (2; node-limited: ceil(top_k / M)).
        self.group_top = int(cfg.get("group_top", 2))
        # Loss-free balancing's bias: added to the scores to choose, never to the gates.
        if cfg.get("score_bias", False):
            self.register_buffer("score_bias", torch.zeros(self.num_experts))
        else:
            self.score_bias = None
        shared = int(cfg.get("shared_experts", 0))
        self.shared = (FeedForward(d_model, shared * int(cfg["d_shared"]), cfg["activation"], bias)
                       if shared > 0 else None)
        if self.shared is not None and cfg.get("shared_expert_gate", False):
            # Qwen2-MoE: the shared output times sigmoid(y . w), one logit per token.
            self.shared.gate = nn.Linear(d_model, 1, bias=False)
        sm = cfg["sparsemixer"]
        if sm["enabled"] and sm["omega"]:
            self.omega = nn.Parameter(torch.ones(d_model))
        else:
            self.register_parameter("omega", None)

    def choose(self, logits):
        """The routing decisions at evaluation: (idx [T, K], mask). idx holds the chosen experts,
        top-1 first (ties to the lowest index); mask [T, E] bool is SparseMixer's masked-softmax
        set (None for top-k softmax routing)."""
        if self.cfg["sparsemixer"]["enabled"]:
            imax = _first_max(logits)[:, None]
            return imax, self.sparsemixer_mask(logits, imax)
        choice = self.choice_scores(logits)
        return torch.sort(choice, dim=1, descending=True, stable=True).indices[:, : self.top_k], None

    def scores(self, logits):
        """[T, E] float64: softmax over the experts, or a sigmoid per expert."""
        if self.score_function == "sigmoid":
            return torch.sigmoid(logits.double())
        return torch.softmax(logits.double(), dim=1)

    def choice_scores(self, logits):
        """What top-k selects on: the logits (softmax, no bias: the same order as the scores),
        else the scores plus loss-free balancing's bias; with expert groups, the experts outside
        each token's best `topk_groups` groups set to -inf (group_mask)."""
        keys = self.scores(logits)
        if self.score_bias is not None:
            keys = keys + self.score_bias.double()
        choice = logits if self.score_function == "softmax" and self.score_bias is None else keys
        g = self.expert_groups
        if g > 1 and self.topk_groups < g:
            t, e = choice.shape
            mask = self.group_mask(keys)
            choice = choice.reshape(t, g, e // g).masked_fill(~mask[:, :, None], float("-inf"))
            choice = choice.reshape(t, e)
        return choice

    def group_sums(self, keys):
        """[T, G]: each group's score, the sum of its `group_top` best keys (scores plus bias),
        added from the largest down."""
        t, e = keys.shape
        g = self.expert_groups
        grouped = keys.reshape(t, g, e // g)
        best = torch.sort(grouped, dim=2, descending=True).values[:, :, : min(self.group_top, e // g)]
        total = best[:, :, 0]
        for i in range(1, best.shape[2]):
            total = total + best[:, :, i]
        return total

    def group_mask(self, keys):
        """[T, G] bool: the groups each token keeps, the `topk_groups` of largest group_sums
        (ties: the lower group)."""
        t = keys.shape[0]
        g = self.expert_groups
        keep = torch.sort(self.group_sums(keys), dim=1, descending=True, stable=True).indices
        mask = torch.zeros(t, g, dtype=torch.bool, device=keys.device)
        mask.scatter_(1, keep[:, : self.topk_groups], True)
        return mask

    def sparsemixer_mask(self, logits, imax):
        """SparseMixer's set [T, E] bool for the argmax `imax` [T, 1]: the experts within the
        jitter band of it (sparsemixer_margins says how far each is from the band's edge)."""
        diff, threshold = self.sparsemixer_margins(logits, imax)
        keep = diff <= threshold
        keep.scatter_(1, imax, True)
        return keep

    def sparsemixer_margins(self, logits, imax):
        """(top - logit, the band's half-width) [T, E] in float64, for the argmax `imax`."""
        sm = self.cfg["sparsemixer"]
        th = logits.double()
        top = th.gather(1, imax)
        r = float(sm["jitter"])
        if sm["mask"] == "paper":
            return top - th, r * (top.abs() + th.abs())
        return top - th, 2.0 * r * torch.maximum(th.abs(), top)

    def gates(self, logits, idx, mask):
        """gate [T, K] for the decisions (idx, mask): SparseMixer gates its argmax by its
        probability under the masked softmax; top-k softmax routing renormalises over the K."""
        if mask is not None:
            th = logits.double()
            top = th.gather(1, idx)
            lse = torch.logsumexp(th.masked_fill(~mask, float("-inf")), dim=1, keepdim=True)
            return torch.exp(top - lse).to(logits.dtype)
        if self.score_function == "softmax" and self.renormalize:
            chosen = logits.gather(1, idx).double()
            gate = torch.softmax(chosen - chosen[:, :1], dim=1)
        else:
            gate = self.scores(logits).gather(1, idx)
            if self.renormalize:
                gate = gate / gate.sum(dim=1, keepdim=True)
        return (gate * self.routed_scaling).to(logits.dtype)

    def route(self, logits):
        """(idx [T, K], gate [T, K]) at evaluation."""
        idx, mask = self.choose(logits)
        return idx, self.gates(logits, idx, mask)

    def slots(self, idx):
        """[T, K] long: each assignment's slot in its expert's block, -1 when it is past the
        evaluation capacity (no drops without one). The first choices in token order fill each
        expert's slots first, then the second choices..."""
        factor = float(self.cfg["eval_capacity_factor"])
        t, k = idx.shape
        used = torch.zeros(self.num_experts, dtype=torch.long, device=idx.device)
        slot = torch.empty(t, k, dtype=torch.long, device=idx.device)
        for j in range(k):
            onehot = F.one_hot(idx[:, j], self.num_experts)
            before = (onehot.cumsum(0) - onehot).gather(1, idx[:, j : j + 1]).squeeze(1)
            slot[:, j] = used[idx[:, j]] + before
            used += onehot.sum(0)
        if factor > 0:
            capacity = math.ceil(factor * t * k / self.num_experts)
            slot[slot >= capacity] = -1
        return slot

    def kept(self, idx):
        """[T, K] bool: the assignments inside the evaluation capacity (all without one)."""
        return self.slots(idx) >= 0

    def forward(self, x_in, x_base, p_in, prev_top1, replay=None):
        """Returns (out, p_out, top1) for x_in, x_base [T, D], the incoming momentum state p_in
        ([T, D] or None before the first MoE layer) and the previous MoE layer's top-1 experts.
        With a `replay` (replay.py), the routing decisions are another path's, compared with
        this layer's own first."""
        res = self.res
        y = x_in
        if p_in is not None and res["input_shift"] != 0:
            y = (x_in.double() + res["input_shift"] * p_in.double()).to(x_in.dtype)
        r = y
        ac = self.cfg["ac_router"]
        if ac["enabled"] and prev_top1 is not None:
            r = y * ac_metric(y, prev_top1, self.num_experts, ac)[prev_top1]
        if ac["enabled"] and ac.get("logits", "linear") == "unit_norm_embeddings":
            # The experts' embeddings (the weight's rows) at unit L2 norm, no bias.
            w = self.router.weight.double()
            norm = torch.sqrt((w * w).sum(dim=1, keepdim=True))
            unit = torch.where(norm > 0, w / norm.clamp(min=1e-300), torch.zeros_like(w))
            weight, bias = unit, None
            logits = r @ unit.to(r.dtype).t()
        else:
            weight, bias = self.router.weight, self.router.bias
            logits = self.router(r)
        idx, mask = self.choose(logits)
        if replay is not None:
            # The magnitude each logit's rounding is relative to: sum_q |r_q| |W_eq| (+ |b_e|).
            magnitude = r.abs().double() @ weight.abs().double().t()
            if bias is not None:
                magnitude = magnitude + bias.abs().double()
            idx, mask = replay.decide(self, logits, idx, mask, magnitude.amax(dim=1))
        gate = self.gates(logits, idx, mask)
        kept = self.kept(idx)
        u = torch.zeros_like(x_in)
        for e, expert in enumerate(self.experts):
            tokens, choice = ((idx == e) & kept).nonzero(as_tuple=True)
            if tokens.numel() == 0:
                continue
            out = expert(y[tokens])
            if self.omega is not None:
                out = out * self.omega
            u.index_add_(0, tokens, gate[tokens, choice][:, None] * out)
        if self.shared is not None:
            s = self.shared(y)
            if hasattr(self.shared, "gate"):
                s = torch.sigmoid(self.shared.gate(y)) * s
            u = u + s

        # The residual dynamics, per element in float64 (kernels/cpu/residual_math.h).
        x, ud = x_base.double(), u.double()
        p_prev = p_in.double() if p_in is not None else torch.zeros_like(ud)
        form = res["form"]
        if form == "plain":
            out, p_out = x + ud, p_prev
        elif form == "momentum":
            p_out = res["a_state"] * p_prev + res["a_input"] * ud
            out = x + res["a_out"] * p_out
        elif form == "adam":
            # The Adam moments start at zero in this (the first MoE) layer.
            m = (1 - res["beta1"]) * ud
            v = (1 - res["beta2"]) * ud * ud
            if res["eps_inside_sqrt"]:
                denom = torch.sqrt(v + res["eps"])
            else:
                denom = torch.sqrt(v) + res["eps"]
            out = (1 - res["kappa"]) * x + res["adam_sign"] * res["gamma"] * m / denom
            p_out = res["a_state"] * p_prev + res["a_input"] * ud
        else:
            raise ValueError(f"unknown residual form {form!r}")
        # The next AC layer's clusters: this layer's argmax (the first choice).
        return out.to(x_base.dtype), p_out.to(x_base.dtype), idx[:, 0]


class Block(nn.Module):
    def __init__(self, cfg, block_cfg, moe_index=0, where="block", cross_check=True):
        super().__init__()
        d = int(cfg["d_model"])
        bias = bool(cfg.get("linear_bias", True))
        rope_base = float(cfg["rope_base"]) if cfg.get("position") == "rope" else None
        self.post_ln = cfg["block_style"] == "post_ln_double_residual"
        qk_norm_eps = float(cfg.get("norm_eps", 1e-5)) if cfg.get("qk_norm", False) else None
        self.attn = Attention(d, int(cfg["n_heads"]), bias, rope_base, qk_norm_eps)
        self.ln1 = _norm(cfg, d)
        self.ln2 = _norm(cfg, d)
        self.is_moe = block_cfg["type"] == "moe"
        if self.is_moe:
            if self.post_ln:
                self.ln_in = _norm(cfg, d)
            self.moe = MoeLayer(d, block_cfg, moe_index, where, cross_check, bias)
        else:
            self.ffn = FeedForward(d, int(cfg["d_ff"]), cfg["activation"], bias)

    def forward(self, h, state):
        """h [B, S, D]; state: {"p", "top1", "replay"} threaded through the MoE layers (p and
        top1 updated)."""
        b, s, d = h.shape
        if self.post_ln:
            h = self.ln1(h + self.attn(h))
        else:
            h = h + self.attn(self.ln1(h))
        if self.is_moe:
            flat = h.reshape(b * s, d)
            x_in = flat if self.post_ln else self.ln2(flat)
            out, state["p"], state["top1"] = self.moe(x_in, flat, state["p"], state["top1"],
                                                      state["replay"])
            if not self.post_ln:
                return out.reshape(b, s, d)
            return self.ln2(flat + self.ln_in(out)).reshape(b, s, d)
        if self.post_ln:
            return self.ln2(h + self.ffn(h))
        return h + self.ffn(self.ln2(h))


class MomoeLM(nn.Module):
    """The language model: token + learned position embeddings (none with RoPE), the blocks,
    (pre-LN) a final norm, and the output head (or the token embedding, when tied). `cross_check`: refuse an
    export whose "residual" coefficients (momoe's) differ from those derived from "dynamics"
    (dynamics.ResidualMismatchError, naming both)."""

    def __init__(self, cfg, cross_check=True):
        super().__init__()
        if cfg.get("format") != FORMAT or int(cfg.get("format_version", 0)) != FORMAT_VERSION:
            raise ValueError(
                f"config: format {cfg.get('format')!r} version {cfg.get('format_version')!r} is "
                f"not {FORMAT!r} version {FORMAT_VERSION}"
            )
        self.cfg = cfg
        v, d, s = int(cfg["vocab_size"]), int(cfg["d_model"]), int(cfg["seq_len"])
        self.seq_len = s
        self.embed_tokens = nn.Embedding(v, d)
        # Rotary models have no learned positions.
        self.embed_positions = None if cfg.get("position") == "rope" else nn.Embedding(s, d)
        moe_index = [sum(1 for b in cfg["blocks"][:i] if b["type"] == "moe")
                     for i in range(len(cfg["blocks"]))]
        self.blocks = nn.ModuleList(Block(cfg, b, m, f"blocks[{i}]", cross_check)
                                    for i, (b, m) in enumerate(zip(cfg["blocks"], moe_index)))
        if cfg["block_style"] == "pre_ln":
            self.final_ln = _norm(cfg, d)
        else:
            self.final_ln = None
        self.head = None if cfg["tie_embeddings"] else nn.Linear(d, v, bias=False)

    def forward(self, ids, replay=None):
        """ids [B, S] (S <= seq_len) -> logits [B, S, V]. Every sequence of the batch is one
        batch for the MoE layers (an AC router's metric and an evaluation capacity see them all).
        `replay` (replay.RoutingReplay): take another path's routing decisions for this batch."""
        b, s = ids.shape
        if s > self.seq_len:
            raise ValueError(f"sequences of {s} tokens: the model has {self.seq_len} positions")
        h = self.embed_tokens(ids)
        if self.embed_positions is not None:
            h = h + self.embed_positions(torch.arange(s, device=ids.device))[None]
        state = {"p": None, "top1": None, "replay": replay}
        for block in self.blocks:
            h = block(h, state)
        if self.final_ln is not None:
            h = self.final_ln(h)
        weight = self.embed_tokens.weight if self.head is None else self.head.weight
        if replay is not None:
            replay.end_batch(b * s)
        return h @ weight.t()


def load(folder, dtype=torch.float32, device="cpu", cross_check=True):
    """The model of a momoe-export folder (config.json + model.safetensors), in eval mode.
    `cross_check` (MomoeLM): momoe's "residual" coefficients must equal the derived ones."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = MomoeLM(cfg, cross_check)
    tensors, _ = read_safetensors(os.path.join(folder, "model.safetensors"))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    return model.to(device=device, dtype=dtype).eval()
