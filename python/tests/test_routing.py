"""The module's routing of current models by hand, on the cases momoe's kernel test uses
(tests/kernels/router_test.cc TopkRouteTest.GroupLimitedChoosesInsideTheBestGroups and
SelectionBiasChangesTheChoiceOnly): two implementations held by the same hand-worked values,
sigmoid and softmax scores, group-limited choice, loss-free balancing's bias, renormalised and
scaled gates."""

import math

import torch

from momoe_torch.model import MoeLayer


def layer(score="sigmoid", groups=1, topk_groups=1, bias=None, top_k=2, experts=8, **extra):
    cfg = {"num_experts": experts, "top_k": top_k, "d_expert": 2, "activation": "relu",
           "eval_capacity_factor": 0.0, "dynamics": {"kind": "plain", "convention": "paper"},
           "ac_router": {"enabled": False}, "sparsemixer": {"enabled": False},
           "score_function": score, "expert_groups": groups, "topk_groups": topk_groups,
           "score_bias": bias is not None, **extra}
    m = MoeLayer(4, cfg, cross_check=False)
    if bias is not None:
        m.score_bias.copy_(torch.tensor(bias, dtype=torch.float64))
    return m


LOGITS = torch.tensor([[3, -3, 1, 1, 0.5, 0.5, 2, -4]], dtype=torch.float64)


def chosen(m, logits=LOGITS):
    return m.choose(logits)[0][0].tolist()


def test_group_limited_choice_by_hand():
    # Sigmoid group sums 1.0, 1.46, 1.24, 0.90: groups 1 and 2 kept, expert 0 is not chosen.
    assert chosen(layer(groups=4, topk_groups=2)) == [2, 3]
    # A bias of 0.5 on expert 7 lifts group 3 over group 2.
    assert chosen(layer(groups=4, topk_groups=2, bias=[0] * 7 + [0.5])) == [6, 2]
    assert chosen(layer(groups=4, topk_groups=4)) == [0, 6]  # every group: the plain top-2
    # Softmax: the probabilities' group sums, which the largest logit dominates.
    assert chosen(layer("softmax", groups=4, topk_groups=2)) == [0, 6]
    tied = torch.tensor([[1, 1, 1, 1, 3, 0, 0, 0]], dtype=torch.float64)
    assert chosen(layer("softmax", groups=4, topk_groups=2), tied) == [4, 0]


def test_node_limited_group_score_by_hand():
    # tests/kernels/router_test.cc NodeLimitedScoresAGroupByItsBestKOverM: three groups of four,
    # two kept, top-6; group 0 wins on its two best scores and loses on its three best.
    logits = torch.tensor([[3, 3, -4, -4, 2, 2, 2, -4, 1, 1, 1, 1]], dtype=torch.float64)
    two = layer(groups=3, topk_groups=2, top_k=6, experts=12)
    assert chosen(two, logits) == [0, 1, 4, 5, 6, 2]
    three = layer(groups=3, topk_groups=2, top_k=6, experts=12, group_top=3)
    assert chosen(three, logits) == [4, 5, 6, 8, 9, 10]


def test_sigmoid_gates_and_the_bias_by_hand():
    logits = torch.tensor([[0, 1, -1, 2]], dtype=torch.float64)
    s = [1 / (1 + math.exp(-x)) for x in (0, 1, -1, 2)]
    m = layer(experts=4, bias=[0, 0, 0.7, 0])  # keys .5, .73, .97, .88
    idx, gate = m.route(logits)
    assert idx.tolist() == [[2, 3]]
    assert torch.allclose(gate, torch.tensor([[s[2], s[3]]], dtype=torch.float64) / (s[2] + s[3]))
    scaled = layer(experts=4, routed_scaling=2.5, renormalize=False)
    idx, gate = scaled.route(logits)
    assert idx.tolist() == [[3, 1]]
    assert torch.allclose(gate, 2.5 * torch.tensor([[s[3], s[1]]], dtype=torch.float64))


def test_a_group_choice_that_differs_must_be_a_near_tie():
    from momoe_torch import cross_path as cp
    from momoe_torch.replay import RoutingReplay

    replay = RoutingReplay.__new__(RoutingReplay)  # group_flips reads only .rows
    replay.rows = 0
    m = layer(groups=4, topk_groups=2)
    # Sigmoid group sums 1.0, 1.46, 1.24, 0.90 (keeps groups 1, 2). Another path chose expert 0
    # (group 0, whose sum is 0.24 below the kept threshold 1.24).
    theirs = torch.tensor([[0, 2]])
    far = cp.LayerDecisions()
    replay.group_flips(m, LOGITS, theirs, torch.tensor([1e-6], dtype=torch.float64), far)
    assert far.far_flips == 1 and "outside the module's groups [1, 2]" in far.first_error[1]
    # With a tolerance that covers the gap, the same choice is a near-tie; the keys it returns
    # let compare_choices see expert 0 (group 0 unmasked).
    near = cp.LayerDecisions()
    z = replay.group_flips(m, LOGITS, theirs, torch.tensor([0.2], dtype=torch.float64), near)
    assert near.far_flips == 0 and near.first_error is None
    assert math.isfinite(float(z[0, 0])) and float(z[0, 6]) == float("-inf")
