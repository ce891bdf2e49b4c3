"""How two computation paths of one model are compared: the rule every cross-path test follows.

Two paths (momoe's float32 forward with some BLAS kernel, and this module in float64; a GPU and a
CPU) compute the same function with different rounding. They agree bit for bit only where the code
path is the same by design. Otherwise:

1. Discrete decisions first. Routing (the top-k experts, SparseMixer's masked set, the capacity
   slots and, through the top-1, the next AC layer's clusters) is compared decision by decision
   and counted. A flip is legitimate only at a near-tie: the reference's own margin between the
   two choices is within the rounding of the values it was decided on
   (decision_tolerance). Anything else is an error of one path. Then the second path takes the
   first path's decisions (replay.py), so that the values compare on equal decisions.
2. Values are bounded by the arithmetic: float32 epsilon (bfloat16's for a bfloat16 path) times
   the depth of the computation (the number of rounding stages between the inputs and the value,
   forward_depth) times the magnitude the errors are relative to. Never by what one machine
   measured. For a perplexity: each stage rounds values that LayerNorm keeps of order 1, and the
   last (the log-softmax) rounds the NLL itself, so |ln ppl_a - ln ppl_b| <= eps x (depth + mean
   NLL); for a router logit: eps x depth x sum_q |r_q| |W_eq|, twice that for the margin between
   two logits.

tests/testing/cross_path.h is the C++ twin (the same constants, kBf16Eps included, and stage
counts).
"""

import math

F32_EPS = 2.0 ** -23  # float32 machine epsilon (FLT_EPSILON)
# bfloat16's machine epsilon (8 significant bits: torch.finfo(torch.bfloat16).eps; its unit
# roundoff is half of it, 2^-8), for a path that rounds every stage and its weights to bfloat16.
BF16_EPS = 2.0 ** -7

# Rounding stages of one forward pass, each a GEMM, a normalisation, a softmax or an elementwise
# update whose float32 rounding reaches the next stage. Counted for the longest variant of each
# sublayer (pre-LN or post-LN, robust shift, AC transform), so one table bounds every family.
STAGES = {
    "embedding": 1,          # token + position embedding
    "attention": 7,          # qkv, scores, softmax, context, output projection, residual, LayerNorm
    "moe_to_router": 4,      # (pre-LN) LayerNorm, robust input shift, AC transform, router GEMM
    "moe_after_router": 9,   # gates, fc1, activation, fc2, combine, residual dynamics, LN_in, add, LN
    "dense": 5,              # fc1, activation, fc2, residual, LayerNorm
    "head": 3,               # (pre-LN) final LayerNorm, head GEMM, log-softmax
    # Options of current models, each one more rounding stage where it applies:
    "rope": 1,               # the rotation of q and k (attention)
    "qk_norm": 2,            # q and k's per-head RMSNorm: the rms, the scaling (attention)
    "gated": 1,              # SwiGLU's product silu(gate) * up (dense FFN, experts)
    "shared": 1,             # adding the shared experts' output to the routed experts'
    "shared_gate": 2,        # Qwen2-MoE's gate on it: the logit y . w, the product by its sigmoid
}


def forward_depth(cfg):
    """(router depths [one per MoE layer], total depth) of a momoe-export config.json."""
    depth = STAGES["embedding"]
    routers = []
    attention = STAGES["attention"] + (STAGES["rope"] if cfg.get("position") == "rope" else 0)
    attention += STAGES["qk_norm"] if cfg.get("qk_norm", False) else 0
    for block in cfg["blocks"]:
        depth += attention
        if block["type"] == "moe":
            routers.append(depth + STAGES["moe_to_router"])
            depth += STAGES["moe_to_router"] + STAGES["moe_after_router"]
            depth += STAGES["gated"] if block.get("activation") == "swiglu" else 0
            depth += STAGES["shared"] if int(block.get("shared_experts", 0)) > 0 else 0
            depth += STAGES["shared_gate"] if block.get("shared_expert_gate", False) else 0
        else:
            depth += STAGES["dense"]
            depth += STAGES["gated"] if cfg.get("activation") == "swiglu" else 0
    return routers, depth + STAGES["head"]


def rounding_tolerance(depth, scale=1.0, eps=F32_EPS):
    """The bound on the difference between two roundings of a value computed through `depth`
    stages, each with relative error eps, relative to `scale` (at least 1: an absolute floor)."""
    return eps * depth * max(1.0, abs(float(scale)))


def decision_tolerance(depth, magnitude, eps=F32_EPS):
    """How far one router logit of a path of `depth` stages of relative error `eps` (float32
    unless told) may be from the exact value: rounding_tolerance at the magnitude its rounding
    scales with, sum_q |r_q| |W_eq| (+ |b_e|) (a float, or a tensor of rows). Twice it bounds a
    margin between two logits."""
    try:
        return eps * depth * magnitude.clamp(min=1.0)
    except AttributeError:
        return rounding_tolerance(depth, magnitude, eps)


def perplexity_tolerance(depth, mean_nll, eps=F32_EPS):
    """The bound on |ln ppl_a - ln ppl_b| between a path of `depth` stages and the exact value:
    eps x (depth + mean NLL) (module docstring)."""
    return eps * (depth + abs(mean_nll))


class LayerDecisions:
    """The decisions of one MoE layer compared between two paths, counted."""

    def __init__(self):
        self.rows = 0             # tokens compared
        self.flips = 0            # tokens whose chosen experts (or their order) differ
        self.far_flips = 0        # of those, not at a near-tie of the reference: an error
        self.max_margin = 0.0     # the largest flip margin, in units of its tolerance
        self.mask_entries = 0     # SparseMixer set entries compared
        self.mask_flips = 0
        self.far_mask_flips = 0
        self.slot_mismatches = 0  # capacity slots that differ on the same choices: an error
        self.first_error = None   # (row, what) of the first error

    def as_dict(self):
        return {k: v for k, v in vars(self).items()}


def choice_margins(logits, chosen):
    """For each row, how far the chosen ranking (chosen [T, K], best first) falls short of the
    best ranking of `logits` [T, E] (float64): max over j of (the best logit outside chosen[:j])
    minus logits[chosen[j]]; 0 when `chosen` is a true top-K ranking."""
    import torch

    t, k = chosen.shape
    remaining = logits.clone()
    margin = torch.zeros(t, dtype=logits.dtype, device=logits.device)
    rows = torch.arange(t, device=logits.device)
    for j in range(k):
        best = remaining.max(dim=1).values
        mine = remaining[rows, chosen[:, j]]
        margin = torch.maximum(margin, best - mine)
        remaining[rows, chosen[:, j]] = float("-inf")
    return margin


def compare_choices(report, own, theirs, logits, tol, row_offset=0):
    """Counts the rows where `theirs` [T, K] differs from `own`; each must be a near-tie of the
    reference `logits` [T, E] (float64): its choice margin within `tol` [T]."""
    differ = (own != theirs).any(dim=1)
    report.rows += int(own.shape[0])
    if not bool(differ.any()):
        return
    margin = choice_margins(logits, theirs)[differ]
    ratio = margin / tol[differ]
    report.flips += int(differ.sum())
    far = ratio > 1.0
    report.far_flips += int(far.sum())
    report.max_margin = max(report.max_margin, float(ratio.max()))
    if bool(far.any()) and report.first_error is None:
        row = int(differ.nonzero()[far.nonzero()[0, 0], 0])
        report.first_error = (row_offset + row, f"chose {theirs[row].tolist()}, the reference "
                              f"{own[row].tolist()} (logits {logits[row].tolist()})")


def compare_masks(report, own, theirs, edge_distance, tol, row_offset=0):
    """SparseMixer's sets [T, E]: each differing entry must lie within `tol` [T] of the band's
    edge (`edge_distance` [T, E] = |diff - half-width| in the reference)."""
    differ = own != theirs
    report.mask_entries += int(own.numel())
    if not bool(differ.any()):
        return
    report.mask_flips += int(differ.sum())
    far = differ & (edge_distance > tol[:, None])
    report.far_mask_flips += int(far.sum())
    if bool(far.any()) and report.first_error is None:
        row = int(far.nonzero()[0, 0])
        report.first_error = (row_offset + row, f"SparseMixer set {theirs[row].int().tolist()}, "
                              f"the reference {own[row].int().tolist()}")


def compare_slots(report, own, theirs, row_offset=0):
    """Capacity slots [T, K] computed by both paths from the same choices: equal, or an error."""
    differ = (own != theirs).any(dim=1)
    if not bool(differ.any()):
        return
    report.slot_mismatches += int(differ.sum())
    if report.first_error is None:
        row = int(differ.nonzero()[0, 0])
        report.first_error = (row_offset + row, f"slots {theirs[row].tolist()}, the capacity "
                              f"rule on the same choices gives {own[row].tolist()}")


def check_perplexity(name, momoe, reference, cfg):
    """The verdict of momoe-eval's result against the reference module's (replaying momoe's
    decisions): (ok, lines). `momoe` and `reference` are their JSON results; `reference` is
    computed on momoe's decisions ("replayed") and holds "decisions" (one LayerDecisions dict per
    MoE layer). The reference's own rounding: none for "dtype" float64 (the default), float32's
    for any other dtype, or "eps" per stage where given (BF16_EPS for a bfloat16 path)."""
    lines, ok = [], True
    if not reference.get("replayed"):
        return False, [f"{name}: the reference did not replay momoe's decisions (--replay)"]
    if momoe["tokens"] != reference["tokens"]:
        return False, [f"{name}: momoe-eval scored {momoe['tokens']} tokens, the reference "
                       f"{reference['tokens']}"]
    decisions = reference["decisions"]
    flips = sum(d["flips"] + d["mask_flips"] + d["slot_mismatches"] for d in decisions)
    lines.append(f"{name}: decisions: {len(decisions)} MoE layers x {decisions[0]['rows']} tokens, "
                 f"{flips} differ" + (":" if flips else ""))
    for layer, d in enumerate(decisions):
        if d["flips"] + d["mask_flips"] + d["slot_mismatches"] == 0:
            continue
        lines.append(
            f"  MoE layer {layer}: {d['flips']} tokens routed differently ({d['far_flips']} not at "
            f"a near-tie; largest margin {d['max_margin']:.2g} of its tolerance), SparseMixer set "
            f"entries {d['mask_flips']} of {d['mask_entries']} ({d['far_mask_flips']} not near the "
            f"edge), capacity slots {d['slot_mismatches']} off")
        if d["far_flips"] or d["far_mask_flips"] or d["slot_mismatches"]:
            ok = False
            row, what = d["first_error"]
            lines.append(f"FAIL: {name}: MoE layer {layer}, token {row}: momoe {what}")
    _, depth = forward_depth(cfg)
    mean_nll = math.log(reference["ppl"])
    tol = perplexity_tolerance(depth, mean_nll)
    sides = "eps32 x (depth {} + mean NLL {:.3g})".format(depth, mean_nll)
    if "eps" in reference:  # the reference rounds with its own epsilon: its bound adds
        tol = perplexity_tolerance(depth, mean_nll, F32_EPS + reference["eps"])
        eps = {BF16_EPS: "eps_bf16", F32_EPS: "eps32"}.get(reference["eps"], "{:.3g}".format(
            reference["eps"]))
        sides = "(eps32 + {}) x (depth {} + mean NLL {:.3g}): a {} reference".format(
            eps, depth, mean_nll, reference.get("dtype", "rounding"))
    elif reference.get("dtype", "float64") != "float64":
        tol *= 2  # the reference rounds too
        sides = "2 x " + sides + ": a float32 reference"
    diff = abs(math.log(momoe["ppl"]) - mean_nll)  # |ln ppl_a - ln ppl_b|, ~ the relative difference
    lines.append(
        f"{name}: momoe-eval ppl {momoe['ppl']:.9g}, reference on momoe's decisions "
        f"{reference['ppl']:.9g}: |ln ratio| {diff:.2e} <= {tol:.2e} ({sides})")
    if not diff <= tol:
        ok = False
        lines.append(f"FAIL: {name}: the perplexities on equal decisions differ by {diff:.3e} "
                     f"(> {tol:.3e})")
    return ok, lines
