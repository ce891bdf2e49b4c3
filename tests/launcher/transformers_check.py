"""transformers_export_test's check: transformers itself loads momoe-export's transformers layout
(EXPORT/transformers) through AutoModelForCausalLM, in float64, and its perplexity is compared
with momoe-eval's under the cross-path rule (python/momoe_torch/cross_path.py): an independent
implementation of the block and the routing.

usage: transformers_check.py MODULE_DIR EXPORT DATASET ROUTING EVAL_JSON ARCHITECTURE

Decisions first: hooks on every MoE layer's router (the nn.Linear whose name ends in ".gate")
record its input and logits; transformers' choice (the top-k of its float64 logits) is compared
with momoe-eval's routing file (--routing-out) token by token, and every difference must be a
near-tie of those logits (cross_path.compare_choices). Values second: with no difference,
transformers' perplexity and momoe-eval's agree within float32 epsilon x (depth + mean NLL).
transformers cannot take another path's decisions, so when near-ties did flip, the values are
checked in two steps: python/momoe_torch in float64 on its own decisions must make transformers'
choices and give its perplexity within float64 rounding, and momoe_torch replaying momoe-eval's
decisions must meet the rule against momoe-eval (as export_test checks every export).
"""

import json
import math
import os
import sys

MAX_SEQUENCES = 40


class RouterHooks:
    """The router input and logits of every MoE layer, per forward call."""

    def __init__(self, model, experts):
        self.calls = []
        self.gates = [m for n, m in model.named_modules()
                      if n.endswith(".gate") and getattr(m, "out_features", 0) == experts]
        for layer, gate in enumerate(self.gates):
            gate.register_forward_hook(self.hook(layer))

    def hook(self, layer):
        def record(module, inputs, output):
            x = inputs[0].reshape(-1, inputs[0].shape[-1])
            self.calls.append((layer, x.detach(), output.reshape(x.shape[0], -1).detach(),
                               module.weight.detach()))
        return record


class Decisions:
    """transformers' model as momoe_torch.perplexity evaluates a module (logits for ids [B, S]),
    comparing after every batch its routing decisions (the top-k of each router's float64
    logits) with the routing file's rows of that batch (cross_path.LayerDecisions per layer)."""

    def __init__(self, hf, seq_len, batch, replay_rows, routers, top_k):
        from momoe_torch import cross_path as cp

        self.hf, self.seq_len, self.top_k = hf, seq_len, top_k
        self.cfg = {"eval_batch_size": batch}
        self.hooks = RouterHooks(hf, int(hf.config.num_local_experts))
        self.replay_rows, self.routers = replay_rows, routers
        self.reports = [cp.LayerDecisions() for _ in routers]
        self.row = 0

    def parameters(self):
        return self.hf.parameters()

    def __call__(self, inputs, replay=None):
        import torch

        from momoe_torch import cross_path as cp

        self.hooks.calls.clear()
        logits = self.hf(inputs).logits
        t = inputs.numel()
        for layer, x, z, w in self.hooks.calls:
            z = z.double()
            own = torch.sort(z, dim=1, descending=True, stable=True).indices[:, : self.top_k]
            theirs = torch.from_numpy(self.replay_rows[layer][self.row : self.row + t].copy())
            magnitude = (x.abs().double() @ w.abs().double().t()).amax(dim=1)
            tol = 2 * cp.decision_tolerance(self.routers[layer], magnitude)
            cp.compare_choices(self.reports[layer], own, theirs.long(), z, tol, self.row)
        self.row += t
        return logits


def main():
    module_dir, export, dataset, routing, eval_json, architecture = sys.argv[1:7]
    sys.path.insert(0, module_dir)
    import torch
    import transformers

    import momoe_torch
    from momoe_torch import cross_path as cp
    from momoe_torch.replay import RoutingReplay
    from momoe_torch.safetensors_numpy import read_safetensors

    torch.set_num_threads(2)
    cfg = json.load(open(os.path.join(export, "config.json"), encoding="utf-8"))
    hf_dir = os.path.join(export, "transformers")
    hf_cfg = json.load(open(os.path.join(hf_dir, "config.json"), encoding="utf-8"))
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, torch_dtype=torch.float64, attn_implementation="eager").eval()
    if type(hf).__name__ != architecture:
        sys.exit(f"FAIL: transformers built {type(hf).__name__}, not {architecture}")
    print(f"transformers {transformers.__version__} loaded {architecture} "
          f"(model_type {hf_cfg['model_type']}, {sum(p.numel() for p in hf.parameters())} "
          "parameters) through AutoModelForCausalLM")
    ids = momoe_torch.read_split(dataset, "train", fingerprint=cfg["tokenizer"]["fingerprint"])
    routers, _ = cp.forward_depth(cfg)
    tensors, meta = read_safetensors(routing)
    batch = int(meta["batch"])
    rows = [tensors[f"moe.{l}.experts"] for l in range(len(routers))]
    wrapped = Decisions(hf, int(cfg["seq_len"]), batch, rows, routers,
                        int(hf_cfg["num_experts_per_tok"]))
    if len(wrapped.hooks.gates) != len(routers):
        sys.exit(f"FAIL: {len(wrapped.hooks.gates)} routers found in transformers' model, momoe "
                 f"has {len(routers)} MoE layers")
    with torch.no_grad():
        result = momoe_torch.perplexity(wrapped, ids, batch, MAX_SEQUENCES)
    decisions = [r.as_dict() for r in wrapped.reports]
    momoe = json.load(open(eval_json))
    flips = sum(d["flips"] for d in decisions)
    # Mixtral computes its routing softmax in float32 whatever the model dtype: one more
    # rounding on the reference side (check_perplexity doubles the bound for it).
    result.update(replayed=flips == 0, dtype="float64, float32 gates", decisions=decisions)
    ok, lines = cp.check_perplexity("transformers", momoe, result, cfg)
    if flips == 0:
        print("\n".join(lines))
        print(f"transformers ppl {result['ppl']:.6f}, momoe-eval {momoe['ppl']:.6f}")
        sys.exit(0 if ok else "FAIL: transformers against momoe-eval")
    # Near-ties flipped: transformers against momoe_torch on the same (its own) decisions, then
    # momoe_torch replaying momoe-eval's decisions against momoe-eval.
    far = sum(d["far_flips"] for d in decisions)
    print(f"transformers: {flips} tokens routed differently from momoe-eval ({far} not at a "
          "near-tie)")
    if far:
        sys.exit("FAIL: transformers' routing differs from momoe-eval's beyond a near-tie")
    module = momoe_torch.load(export, dtype=torch.float64, cross_check=False)
    own = momoe_torch.perplexity(module, ids, batch, MAX_SEQUENCES)
    rel = abs(math.log(own["ppl"]) - math.log(result["ppl"]))
    print(f"transformers ppl {result['ppl']:.9f}, momoe_torch (float64, own decisions) "
          f"{own['ppl']:.9f}: |ln ratio| {rel:.2e}")
    if rel > 1e-9:
        sys.exit("FAIL: transformers and momoe_torch differ in float64 on their own decisions")
    replay = RoutingReplay(routing, cfg, batch)
    reference = momoe_torch.perplexity(module, ids, batch, MAX_SEQUENCES, replay)
    reference.update(replayed=True, dtype="float64", decisions=replay.finish())
    ok, lines = cp.check_perplexity("momoe_torch (replayed)", momoe, reference, cfg)
    print("\n".join(lines))
    sys.exit(0 if ok else "FAIL: momoe_torch replaying momoe-eval's decisions")


if __name__ == "__main__":
    main()
