"""transformers_export_test's check: transformers itself loads momoe-export's transformers layout
(EXPORT/transformers) through AutoModelForCausalLM, and its perplexity is compared with
momoe-eval's under the cross-path rule (python/momoe_torch/cross_path.py): an independent
implementation of the block and the routing.

usage: transformers_check.py MODULE_DIR EXPORT DATASET ROUTING EVAL_JSON ARCHITECTURE
           [--device cpu|cuda] [--dtype float64|bfloat16]

float64 (the default; transformers_export_test.sh): decisions first: hooks on every MoE layer's
router (the module whose name ends in ".gate") record its input and logits; transformers' choice
(the top-k of its float64 logits) is compared with momoe-eval's routing file (--routing-out)
token by token, and every difference must be a near-tie of those logits
(cross_path.compare_choices). Values second: with no difference, transformers' perplexity and
momoe-eval's agree within float32 epsilon x (depth + mean NLL). transformers cannot take another
path's decisions in float64 here, so when near-ties did flip, the values are checked in two
steps: python/momoe_torch in float64 on its own decisions must make transformers' choices and
give its perplexity within float64 rounding, and momoe_torch replaying momoe-eval's decisions
must meet the rule against momoe-eval (as export_test checks every export).

bfloat16 (tests/run_gpu.sh's transformers stage, on the GPU): the same decisions, counted, each
difference a near-tie within bfloat16's rounding; many near-ties flip at that precision, so the
router hooks then make transformers follow momoe-eval's decisions (force_top_k), and its
perplexity must be within (eps_bf16 + eps32) x (depth + mean NLL) of momoe-eval's.

Both: the loaded parameters must be the export's (their count and sum |w|), so that a release that
maps a name differently cannot hide behind a loose bound.
"""

import argparse
import json
import math
import os
import sys

MAX_SEQUENCES = 40


def force_top_k(output, chosen, renormalize):
    """A router's `output` made to choose the experts `chosen` [N, K] (the routing file's, best
    first). Renormalised gates (Mixtral; Qwen2-MoE with norm_topk_prob) are the softmax over the
    chosen logits: keeping those logits and setting every other to -inf leaves them as they were
    and makes the chosen the only finite entries, so top-k picks exactly them.

    transformers 4.x (the block's gate is an nn.Linear; the block computes softmax in float32 over
    all E logits, its top-k, and divides by their sum): the forced logits [N, E]. Gates that are
    the softmax's probabilities themselves (Qwen2-MoE without norm_topk_prob) depend on every
    logit, so no change of the logits alone can force them: refused.
    transformers 5.x (a top-k router whose forward returns (logits, weights [N, K] float32,
    indices [N, K]), the block using the last two): the forced logits, and the weights computed as
    that forward computes them after its F.linear (softmax in float32 over the unforced logits,
    the chosen ones, divided by their sum when renormalised)."""
    import torch

    logits = output if torch.is_tensor(output) else output[0]
    forced = torch.full_like(logits, float("-inf"))
    forced.scatter_(1, chosen, logits.gather(1, chosen))
    if torch.is_tensor(output):
        if not renormalize:
            sys.exit("FAIL: this transformers' router returns only its logits, which cannot "
                     "force gates that are not renormalised")
        return forced
    if renormalize:
        weights = torch.softmax(forced.float(), dim=-1).gather(1, chosen)
        weights = weights / weights.sum(dim=-1, keepdim=True)
    else:
        weights = torch.softmax(logits.float(), dim=-1).gather(1, chosen)
    return (forced, weights.to(output[1].dtype), chosen) + tuple(output[3:])


def router_options(config):
    """(experts per MoE layer, top-k, gates renormalised) of a Mixtral or Qwen2-MoE config."""
    experts = getattr(config, "num_local_experts", None) or config.num_experts
    return int(experts), int(config.num_experts_per_tok), bool(
        getattr(config, "norm_topk_prob", True))


class RouterHooks:
    """The router input and logits of every MoE layer, per forward call; with `forced` set (one
    [N, K] tensor per MoE layer), the routers choose those experts (force_top_k)."""

    def __init__(self, model, experts, renormalize):
        self.calls = []
        self.forced = None
        self.renormalize = renormalize
        # 4.x: an nn.Linear [E, D]; 5.x: a top-k router holding a weight [E, D]. Qwen2-MoE's
        # shared_expert_gate ([1, D], named "..._gate") is not one.
        self.gates = [m for n, m in model.named_modules()
                      if n.endswith(".gate") and getattr(m, "weight", None) is not None
                      and m.weight.dim() == 2 and m.weight.shape[0] == experts]
        for layer, gate in enumerate(self.gates):
            gate.register_forward_hook(self.hook(layer))

    def hook(self, layer):
        def record(module, inputs, output):
            import torch

            if not torch.is_tensor(output) and not (isinstance(output, tuple) and len(output) >= 3):
                raise TypeError(f"the router returned {type(output).__name__}: neither logits "
                                "(transformers 4.x) nor (logits, weights, indices) (5.x)")
            logits = output if torch.is_tensor(output) else output[0]
            x = inputs[0].reshape(-1, inputs[0].shape[-1])
            self.calls.append((layer, x.detach(), logits.reshape(x.shape[0], -1).detach(),
                               module.weight.detach()))
            if self.forced is None:
                return None
            return force_top_k(output, self.forced[layer], self.renormalize)
        return record


class Decisions:
    """transformers' model as momoe_torch.perplexity evaluates a module (logits for ids [B, S]),
    comparing after every batch its routing decisions (the top-k of each router's logits, made
    float64) with the routing file's rows of that batch (cross_path.LayerDecisions per layer);
    with `force`, transformers then routes as the file says."""

    def __init__(self, hf, seq_len, batch, replay_rows, routers, top_k, eps, force):
        from momoe_torch import cross_path as cp

        self.hf, self.seq_len, self.top_k = hf, seq_len, top_k
        self.cfg = {"eval_batch_size": batch}
        experts, _, renormalize = router_options(hf.config)
        self.hooks = RouterHooks(hf, experts, renormalize)
        self.replay_rows, self.routers = replay_rows, routers
        self.reports = [cp.LayerDecisions() for _ in routers]
        self.row = 0
        # A logit of transformers' path is within eps x depth x magnitude of the exact value
        # (eps: 0 in float64, BF16_EPS in bfloat16), momoe's within eps32 x depth x magnitude: a
        # flip's margin is within twice their sum (cross_path.decision_tolerance).
        self.eps, self.force = eps + cp.F32_EPS, force

    def parameters(self):
        return self.hf.parameters()

    def __call__(self, inputs, replay=None):
        import torch

        from momoe_torch import cross_path as cp

        t = inputs.numel()
        rows = [torch.from_numpy(r[self.row : self.row + t].copy()).long().to(inputs.device)
                for r in self.replay_rows]
        self.hooks.calls.clear()
        self.hooks.forced = rows if self.force else None
        logits = self.hf(inputs).logits
        if sorted(c[0] for c in self.hooks.calls) != list(range(len(self.routers))):
            sys.exit(f"FAIL: {len(self.hooks.calls)} router calls in one forward pass, for "
                     f"{len(self.routers)} MoE layers (a router not called as a module?)")
        for layer, x, z, w in self.hooks.calls:
            z = z.double()
            own = torch.sort(z, dim=1, descending=True, stable=True).indices[:, : self.top_k]
            magnitude = (x.abs().double() @ w.abs().double().t()).amax(dim=1)
            tol = 2 * cp.decision_tolerance(self.routers[layer], magnitude, self.eps)
            cp.compare_choices(self.reports[layer], own, rows[layer], z, tol, self.row)
        self.row += t
        return logits


def check_weights(hf, hf_dir, dtype):
    """The parameters transformers built hold the export's values: as many numbers, and the same
    sum |w| (each rounded to `dtype` as loading rounds it; a fused layout only reorders them), in
    float64 within its rounding of the sum. A parameter left at its initialisation fails."""
    import torch

    from momoe_torch.safetensors_numpy import read_safetensors

    tensors, _ = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    want = [torch.from_numpy(a.copy()).to(dtype).double() for a in tensors.values()]
    have = [p.detach().double() for p in hf.parameters()]
    n_want, n_have = sum(t.numel() for t in want), sum(p.numel() for p in have)
    s_want = sum(float(t.abs().sum()) for t in want)
    s_have = sum(float(p.abs().sum().cpu()) for p in have)
    # A float64 sum of n terms of one sign: relative error at most n x 2^-52.
    if n_want != n_have or abs(s_want - s_have) > n_want * 2.0 ** -52 * s_want:
        sys.exit(f"FAIL: transformers' model holds {n_have} parameters (sum |w| {s_have:.9g}), "
                 f"the export {n_want} (sum |w| {s_want:.9g}): some were not loaded from it")


def load(hf_dir, architecture, dtype, device):
    """transformers' model of the export, in `dtype` on `device`, on its plainest code paths:
    eager attention, and in 5.x eager experts (one GEMM per expert, as 4.x computes them, rather
    than 5.x's default grouped_mm)."""
    import transformers

    # `dtype` replaced `torch_dtype` in 4.56; 5.x warns on the old name.
    major, minor = (int(v) for v in transformers.__version__.split(".")[:2])
    options = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}
    if major >= 5:
        options["experts_implementation"] = "eager"
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, attn_implementation="eager", **options).to(device).eval()
    if type(hf).__name__ != architecture:
        sys.exit(f"FAIL: transformers built {type(hf).__name__}, not {architecture}")
    if next(hf.parameters()).dtype != dtype:
        sys.exit(f"FAIL: transformers loaded {next(hf.parameters()).dtype}, not {dtype}")
    return hf


def float64_after_flips(args, cfg, ids, batch, momoe, result, decisions):
    """float64 when near-ties flipped: transformers against momoe_torch on the same (its own)
    decisions, then momoe_torch replaying momoe-eval's decisions against momoe-eval."""
    import torch

    import momoe_torch
    from momoe_torch import cross_path as cp
    from momoe_torch.replay import RoutingReplay

    flips = sum(d["flips"] for d in decisions)
    far = sum(d["far_flips"] for d in decisions)
    print(f"transformers: {flips} tokens routed differently from momoe-eval ({far} not at a "
          "near-tie)")
    if far:
        sys.exit("FAIL: transformers' routing differs from momoe-eval's beyond a near-tie")
    module = momoe_torch.load(args.export, dtype=torch.float64, cross_check=False)
    own = momoe_torch.perplexity(module, ids, batch, MAX_SEQUENCES)
    rel = abs(math.log(own["ppl"]) - math.log(result["ppl"]))
    print(f"transformers ppl {result['ppl']:.9f}, momoe_torch (float64, own decisions) "
          f"{own['ppl']:.9f}: |ln ratio| {rel:.2e}")
    if rel > 1e-9:
        sys.exit("FAIL: transformers and momoe_torch differ in float64 on their own decisions")
    replay = RoutingReplay(args.routing, cfg, batch)
    reference = momoe_torch.perplexity(module, ids, batch, MAX_SEQUENCES, replay)
    reference.update(replayed=True, dtype="float64", decisions=replay.finish())
    ok, lines = cp.check_perplexity("momoe_torch (replayed)", momoe, reference, cfg)
    print("\n".join(lines))
    sys.exit(0 if ok else "FAIL: momoe_torch replaying momoe-eval's decisions")


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("module_dir", "export", "dataset", "routing", "eval_json", "architecture"):
        parser.add_argument(name)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float64", "bfloat16"), default="float64")
    return parser.parse_args()


def main():
    args = arguments()
    sys.path.insert(0, args.module_dir)
    import torch
    import transformers

    import momoe_torch
    from momoe_torch import cross_path as cp
    from momoe_torch.safetensors_numpy import read_safetensors

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()  # 5.x draws one while loading
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"FAIL: torch {torch.__version__} sees no CUDA device")
    if args.device == "cuda":
        # Every bfloat16 GEMM sums in float32 and rounds once (one stage), never in bfloat16.
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    bf16 = args.dtype == "bfloat16"
    cfg = json.load(open(os.path.join(args.export, "config.json"), encoding="utf-8"))
    hf_dir = os.path.join(args.export, "transformers")
    hf_cfg = json.load(open(os.path.join(hf_dir, "config.json"), encoding="utf-8"))
    hf = load(hf_dir, args.architecture, getattr(torch, args.dtype), args.device)
    check_weights(hf, hf_dir, getattr(torch, args.dtype))
    where = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"transformers {transformers.__version__} (torch {torch.__version__}) loaded "
          f"{args.architecture} (model_type {hf_cfg['model_type']}, "
          f"{sum(p.numel() for p in hf.parameters())} parameters) through AutoModelForCausalLM, "
          f"{args.dtype} on {where}")
    ids = momoe_torch.read_split(args.dataset, "train",
                                 fingerprint=cfg["tokenizer"]["fingerprint"])
    routers, _ = cp.forward_depth(cfg)
    tensors, meta = read_safetensors(args.routing)
    batch = int(meta["batch"])
    rows = [tensors[f"moe.{l}.experts"] for l in range(len(routers))]
    wrapped = Decisions(hf, int(cfg["seq_len"]), batch, rows, routers,
                        router_options(hf.config)[1], cp.BF16_EPS if bf16 else 0.0, bf16)
    if len(wrapped.hooks.gates) != len(routers):
        sys.exit(f"FAIL: {len(wrapped.hooks.gates)} routers found in transformers' model, momoe "
                 f"has {len(routers)} MoE layers")
    with torch.no_grad():
        result = momoe_torch.perplexity(wrapped, ids, batch, MAX_SEQUENCES)
    decisions = [r.as_dict() for r in wrapped.reports]
    momoe = json.load(open(args.eval_json))
    flips = sum(d["flips"] for d in decisions)
    if bf16:
        # transformers on momoe-eval's decisions (forced). It rounds every stage to bfloat16 and
        # its weights once on loading: BF16_EPS (twice bfloat16's unit roundoff) per stage covers
        # a GEMM's two roundings; momoe-eval's float32 rounding adds eps32 (check_perplexity).
        result.update(replayed=True, dtype="bfloat16", eps=cp.BF16_EPS, decisions=decisions)
        ok, lines = cp.check_perplexity("transformers", momoe, result, cfg)
        print("\n".join(lines))
        sys.exit(0 if ok else "FAIL: transformers (bfloat16) against momoe-eval")
    # Mixtral and Qwen2-MoE compute their routing softmax in float32 whatever the model dtype:
    # one more rounding on the reference side (check_perplexity doubles the bound for it).
    result.update(replayed=flips == 0, dtype="float64, float32 gates", decisions=decisions)
    ok, lines = cp.check_perplexity("transformers", momoe, result, cfg)
    if flips == 0:
        print("\n".join(lines))
        print(f"transformers ppl {result['ppl']:.6f}, momoe-eval {momoe['ppl']:.6f}")
        sys.exit(0 if ok else "FAIL: transformers against momoe-eval")
    float64_after_flips(args, cfg, ids, batch, momoe, result, decisions)


if __name__ == "__main__":
    main()
