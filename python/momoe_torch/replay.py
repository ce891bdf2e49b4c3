"""Another path's routing decisions, replayed: the module compares them with its own, counts the
differences (cross_path.py's rule), and then takes them, so that its values compare with that
path's on equal decisions.

The decisions come from `momoe-eval --routing-out FILE` (core/train/routing_file.h): per MoE layer
the chosen experts, their capacity slots and SparseMixer's sets, for every row of every evaluation
batch (padding rows included), in evaluation order.
"""

import torch

from . import cross_path
from .safetensors_numpy import read_safetensors

FORMAT = "momoe-routing"


class RoutingReplay:
    def __init__(self, path, cfg, batch):
        tensors, meta = read_safetensors(path)
        if meta.get("format") != FORMAT or meta.get("format_version") != "1":
            raise ValueError(f"{path}: not a {FORMAT} file version 1 (metadata {meta})")
        self.layers = int(meta["layers"])
        self.routers, _ = cross_path.forward_depth(cfg)
        if self.layers != len(self.routers):
            raise ValueError(f"{path}: {self.layers} MoE layers, the model has {len(self.routers)}")
        if int(meta["batch"]) != batch or int(meta["seq_len"]) != int(cfg["seq_len"]):
            raise ValueError(f"{path}: batches of {meta['batch']} x {meta['seq_len']}, evaluated "
                             f"here in {batch} x {cfg['seq_len']}: use the same batch")
        self.experts = [tensors[f"moe.{l}.experts"] for l in range(self.layers)]
        self.slot = [tensors[f"moe.{l}.slot"] for l in range(self.layers)]
        self.mask = [tensors.get(f"moe.{l}.mask") for l in range(self.layers)]
        self.rows = 0  # rows of the file consumed by finished batches
        self.report = [cross_path.LayerDecisions() for _ in range(self.layers)]

    def _rows(self, array, t, what):
        if self.rows + t > array.shape[0]:
            raise ValueError(f"the routing file has {array.shape[0]} rows of {what}; this "
                             f"evaluation needs more (row {self.rows + t})")
        return torch.from_numpy(array[self.rows : self.rows + t].copy())

    def decide(self, layer, logits, own_idx, own_mask, magnitude):
        """The decisions `layer` (a MoeLayer) takes for `logits` [T, E] instead of its own
        (own_idx [T, K], own_mask [T, E] or None), compared first. `magnitude` [T]: per token,
        the largest sum_q |r_q| |W_eq| (+ |b_e|) of its logits (what their rounding scales with)."""
        l, t = layer.moe_index, logits.shape[0]
        report = self.report[l]
        # What top-k chose on: the logits, or scores a sigmoid or softmax of them (plus a bias),
        # which move by at most a logit's rounding (their slopes are at most 1).
        sm = layer.cfg["sparsemixer"]["enabled"]
        z = (logits if sm else layer.choice_scores(logits)).double()
        # One logit's rounding in the other path; a margin between two logits moves by twice it.
        tol = 2 * cross_path.decision_tolerance(self.routers[l], magnitude)
        idx = self._rows(self.experts[l], t, "experts").long().to(own_idx.device)
        if idx.shape != own_idx.shape:
            raise ValueError(f"MoE layer {l}: the routing file chooses {idx.shape[1]} experts per "
                             f"token, the model {own_idx.shape[1]}")
        if not sm and layer.expert_groups > 1 and layer.topk_groups < layer.expert_groups:
            z = self.group_flips(layer, logits, idx, tol, report)
        cross_path.compare_choices(report, own_idx, idx, z, tol, self.rows)
        mask = None
        if own_mask is not None:
            if self.mask[l] is None:
                raise ValueError(f"MoE layer {l} is SparseMixer; the routing file has no sets")
            mask = self._rows(self.mask[l], t, "masks").bool().to(own_idx.device)
            # The reference's set for momoe's argmax: only the band's edge can differ. The edge
            # distance diff - r (|top| + |logit|) moves by (1 + r) x a margin's tolerance.
            diff, half_width = layer.sparsemixer_margins(logits, idx)
            jitter = float(layer.cfg["sparsemixer"]["jitter"])
            cross_path.compare_masks(report, layer.sparsemixer_mask(logits, idx), mask,
                                     (diff - half_width).abs(), (1 + jitter) * tol, self.rows)
        slot = self._rows(self.slot[l], t, "slots").long().to(own_idx.device)
        cross_path.compare_slots(report, layer.slots(idx), slot, self.rows)
        return idx, mask

    def group_flips(self, layer, logits, idx, tol, report):
        """Group-limited routing: where the file's experts lie in a group the module did not keep,
        that group choice must be a near-tie of the group sums (each the sum of `group_top` keys,
        so a difference of two sums moves by group_top times a margin's tolerance, a margin being
        the difference of two keys); a far one is an error (the row's flip itself is counted by
        compare_choices). Returns the choice keys masked to the module's groups plus the file's, on
        which the choices inside the groups are then compared."""
        import torch

        keys = layer.scores(logits)
        if layer.score_bias is not None:
            keys = keys + layer.score_bias.double()
        t, e = keys.shape
        g = layer.expert_groups
        size = e // g
        sums = layer.group_sums(keys)
        summed = min(layer.group_top, size)
        kept = layer.group_mask(keys)
        theirs = torch.zeros_like(kept).scatter_(1, idx // size, True)
        outside = (theirs & ~kept).any(dim=1)
        if bool(outside.any()):
            threshold = torch.sort(sums, dim=1, descending=True).values[:, layer.topk_groups - 1]
            lowest = sums.masked_fill(~theirs, float("inf")).min(dim=1).values
            margin = (threshold - lowest)[outside]
            ratio = margin / (summed * tol[outside])
            far = ratio > 1.0
            report.far_flips += int(far.sum())
            report.max_margin = max(report.max_margin, float(ratio.max()))
            if bool(far.any()) and report.first_error is None:
                row = int(outside.nonzero()[far.nonzero()[0, 0], 0])
                report.first_error = (self.rows + row, f"chose {idx[row].tolist()} outside the "
                                      f"module's groups {kept[row].nonzero().flatten().tolist()}")
        choice = logits if layer.score_function == "softmax" and layer.score_bias is None else keys
        mask = (kept | theirs)[:, :, None].expand(t, g, size).reshape(t, e)
        return choice.double().masked_fill(~mask, float("-inf"))

    def end_batch(self, rows):
        self.rows += rows

    def finish(self):
        """The per-layer reports; every row of the file must have been replayed."""
        total = self.experts[0].shape[0]
        if self.rows != total:
            raise ValueError(f"the routing file has {total} rows, the evaluation used {self.rows}")
        return [r.as_dict() for r in self.report]
