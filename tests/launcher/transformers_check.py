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


def evaluate(hf, ids, seq_len, batch, hooks, replay_rows, routers, top_k):
    """transformers' perplexity of the first MAX_SEQUENCES sequences in momoe-eval's batches,
    and its decisions compared with the routing file's (cross_path.LayerDecisions per layer)."""
    import numpy as np
    import torch

    from momoe_torch import cross_path as cp

    ids = np.asarray(ids, dtype=np.int64)
    reports = [cp.LayerDecisions() for _ in routers]
    n = min((ids.size - 1) // seq_len, MAX_SEQUENCES)
    loss_sum, tokens, row = 0.0, 0, 0
    with torch.no_grad():
        for start in range(0, n, batch):
            seqs = list(range(start, min(n, start + batch)))
            real = len(seqs)
            seqs += [0] * (batch - real)
            rows = np.stack([ids[i * seq_len : i * seq_len + seq_len + 1] for i in seqs])
            hooks.calls.clear()
            logits = hf(torch.from_numpy(rows[:, :-1])).logits[:real].double()
            targets = torch.from_numpy(rows[:real, 1:])
            lse = torch.logsumexp(logits, dim=-1)
            loss_sum += float((lse - logits.gather(-1, targets[..., None]).squeeze(-1)).sum())
            tokens += real * seq_len
            t = batch * seq_len
            for layer, x, z, w in hooks.calls:
                z = z.double()
                own = torch.sort(z, dim=1, descending=True, stable=True).indices[:, :top_k]
                theirs = torch.from_numpy(replay_rows[layer][row : row + t].copy()).long()
                magnitude = (x.abs().double() @ w.abs().double().t()).amax(dim=1)
                tol = 2 * cp.decision_tolerance(routers[layer], magnitude)
                cp.compare_choices(reports[layer], own, theirs, z, tol, row)
            row += t
    return {"ppl": math.exp(loss_sum / tokens), "loss_sum": loss_sum, "tokens": tokens,
            "sequences": n}, [r.as_dict() for r in reports]


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
    hooks = RouterHooks(hf, int(hf_cfg["num_local_experts"]))
    if len(hooks.gates) != len(routers):
        sys.exit(f"FAIL: {len(hooks.gates)} routers found in transformers' model, momoe has "
                 f"{len(routers)} MoE layers")
    result, decisions = evaluate(hf, ids, int(cfg["seq_len"]), batch, hooks, rows, routers,
                                 int(hf_cfg["num_experts_per_tok"]))
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
