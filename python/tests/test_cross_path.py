"""The cross-path rule (momoe_torch/cross_path.py) by hand: the stage count of a model, the
tolerances it gives, the decision comparison (a flip is allowed at a near-tie only) and the
perplexity verdict, each able to fail."""

import math

import pytest
import torch

from momoe_torch import cross_path as cp


def config(*types):
    return {"blocks": [{"type": t} for t in types]}


def test_forward_depth_counts_each_stage():
    # embedding 1; attention 7 per block; an MoE layer 4 to its router and 9 after; dense 5;
    # head 3.
    routers, depth = cp.forward_depth(config("moe", "dense", "moe"))
    assert routers == [1 + 7 + 4, 1 + 7 + 13 + 7 + 5 + 7 + 4]
    assert depth == 1 + (7 + 13) + (7 + 5) + (7 + 13) + 3
    assert cp.forward_depth(config()) == ([], 4)


def test_tolerances_scale_with_depth_and_magnitude_with_a_floor_of_one():
    eps = 2.0**-23
    assert cp.rounding_tolerance(10) == 10 * eps
    assert cp.rounding_tolerance(10, scale=0.001) == 10 * eps  # the absolute floor
    assert cp.rounding_tolerance(10, scale=-8.0) == 80 * eps
    assert cp.decision_tolerance(4, 3.0) == 12 * eps
    rows = cp.decision_tolerance(4, torch.tensor([0.5, 2.0], dtype=torch.float64))
    assert rows.tolist() == [4 * eps, 8 * eps]
    assert cp.perplexity_tolerance(30, -5.0) == 35 * eps
    # Another precision's epsilon (bfloat16's: 8 significant bits).
    assert cp.BF16_EPS == torch.finfo(torch.bfloat16).eps
    assert cp.decision_tolerance(4, 3.0, eps=cp.BF16_EPS) == 12 * 2.0**-7
    rows = cp.decision_tolerance(4, torch.tensor([0.5, 2.0], dtype=torch.float64), cp.BF16_EPS)
    assert rows.tolist() == [4 * 2.0**-7, 8 * 2.0**-7]


def test_choice_margins_is_zero_for_a_true_top_k_and_the_shortfall_otherwise():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0], [0.0, 5.0, 4.999, 1.0]], dtype=torch.float64)
    best = torch.tensor([[0, 2], [1, 2]])
    assert cp.choice_margins(logits, best).tolist() == [0.0, 0.0]
    swapped = torch.tensor([[2, 0], [2, 1]])  # the right experts in the wrong order
    assert cp.choice_margins(logits, swapped).tolist() == pytest.approx([1.0, 0.001])


def test_a_flip_passes_only_at_a_near_tie():
    logits = torch.tensor([[1.0, 1.0 + 1e-9, -3.0], [2.0, 0.0, -1.0]], dtype=torch.float64)
    own = torch.tensor([[1], [0]])
    tol = torch.tensor([1e-6, 1e-6], dtype=torch.float64)
    near = cp.LayerDecisions()
    cp.compare_choices(near, own, torch.tensor([[0], [0]]), logits, tol)
    assert (near.rows, near.flips, near.far_flips, near.first_error) == (2, 1, 0, None)
    far = cp.LayerDecisions()
    cp.compare_choices(far, own, torch.tensor([[1], [1]]), logits, tol, row_offset=10)
    assert (far.flips, far.far_flips) == (1, 1)
    assert far.first_error[0] == 11 and "chose [1]" in far.first_error[1]
    assert far.max_margin == pytest.approx(2.0 / 1e-6)


def test_masks_and_slots():
    report = cp.LayerDecisions()
    own = torch.tensor([[True, False], [True, True]])
    theirs = torch.tensor([[True, True], [True, True]])
    edge = torch.tensor([[0.0, 1e-9], [0.0, 0.0]], dtype=torch.float64)
    cp.compare_masks(report, own, theirs, edge, torch.tensor([1e-6, 1e-6], dtype=torch.float64))
    assert (report.mask_entries, report.mask_flips, report.far_mask_flips) == (4, 1, 0)
    cp.compare_masks(report, own, theirs, edge * 1e6, torch.tensor([1e-6, 1e-6]))
    assert report.far_mask_flips == 1
    slots = cp.LayerDecisions()
    cp.compare_slots(slots, torch.tensor([[0, 1]]), torch.tensor([[0, 1]]))
    assert slots.slot_mismatches == 0
    cp.compare_slots(slots, torch.tensor([[0, 1]]), torch.tensor([[1, 0]]))
    assert slots.slot_mismatches == 1 and "slots [1, 0]" in slots.first_error[1]


def reference(ppl, **decision):
    d = cp.LayerDecisions()
    d.rows = 64
    for key, value in decision.items():
        setattr(d, key, value)
    return {"replayed": True, "tokens": 64, "ppl": ppl, "decisions": [d.as_dict()]}


def test_the_perplexity_verdict():
    cfg = config("moe")  # depth 1 + 7 + 13 + 3 = 24
    ppl = 200.0
    tol = cp.perplexity_tolerance(24, math.log(ppl))
    ok, lines = cp.check_perplexity("m", {"tokens": 64, "ppl": ppl * math.exp(0.9 * tol)},
                                    reference(ppl), cfg)
    assert ok, lines
    ok, lines = cp.check_perplexity("m", {"tokens": 64, "ppl": ppl * math.exp(1.1 * tol)},
                                    reference(ppl), cfg)
    assert not ok and "FAIL: m: the perplexities on equal decisions differ" in lines[-1]
    # A float32 reference rounds too: twice the bound.
    f32 = dict(reference(ppl), dtype="float32")
    assert cp.check_perplexity("m", {"tokens": 64, "ppl": ppl * math.exp(1.5 * tol)}, f32, cfg)[0]
    # A reference with its own epsilon (bfloat16): its bound and momoe's float32 one add.
    bf16 = dict(reference(ppl), dtype="bfloat16", eps=cp.BF16_EPS)
    wide = cp.perplexity_tolerance(24, math.log(ppl), cp.F32_EPS + cp.BF16_EPS)
    ok, lines = cp.check_perplexity("m", {"tokens": 64, "ppl": ppl * math.exp(0.9 * wide)}, bf16,
                                    cfg)
    assert ok and "a bfloat16 reference" in lines[-1], lines
    assert not cp.check_perplexity("m", {"tokens": 64, "ppl": ppl * math.exp(1.1 * wide)}, bf16,
                                   cfg)[0]
    # Decisions: near-tie flips are reported and pass; one far flip fails.
    ok, lines = cp.check_perplexity("m", {"tokens": 64, "ppl": ppl},
                                    reference(ppl, flips=2, max_margin=0.5), cfg)
    assert ok and "2 differ" in lines[0]
    ok, lines = cp.check_perplexity(
        "m", {"tokens": 64, "ppl": ppl},
        reference(ppl, flips=1, far_flips=1, first_error=(3, "chose [2]")), cfg)
    assert not ok and any("MoE layer 0, token 3" in line for line in lines)
    # Not replayed, or not the same tokens: no comparison at all.
    assert not cp.check_perplexity("m", {"tokens": 64, "ppl": ppl},
                                   dict(reference(ppl), replayed=False), cfg)[0]
    assert not cp.check_perplexity("m", {"tokens": 63, "ppl": ppl}, reference(ppl), cfg)[0]
