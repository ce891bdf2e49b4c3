"""The residual dynamics' per-element coefficients, derived from the papers' own quantities.

A momoe-export MoE block carries two records of its residual dynamics:

  "dynamics"  what was configured, as the papers parameterise it: the kind ("plain",
              "heavy_ball", "adam", "robust"), the sign convention ("paper" or
              "reference_code"), mu and gamma, Robust's rho, lipschitz (L) and
              strong_convexity (m), and the Adam settings ("adam": beta1, beta2, eps,
              eps_placement, kappa, gamma);
  "residual"  momoe's coefficients, computed by the very code under test
              (core/layers/moe_layer.cc residual_args_for, input_shift_for).

The module computes from "dynamics" alone, by the equations below (spec/momentum-smoe.md
Sections 2-4), so that a wrong mapping in momoe is not exported and reproduced but seen by the
cross-path comparison. "residual" is only cross-checked (check_residual).

The coefficients are those of the per-element forms momoe and model.MoeLayer compute, with u the
SMoE output (no residual), x the residual base and p the state threaded through the MoE layers
(zero before the first):

  plain:     out = x + u,                                 p_out = p_in
  momentum:  p_out = a_state p_in + a_input u,            out = x + a_out p_out
  adam:      m = (1 - beta1) u,  v = (1 - beta2) u^2      (the moments start at zero)
             out = (1 - kappa) x + adam_sign gamma m / (sqrt(v) + eps)   [sqrt(v + eps) inside]
             p_out = a_state p_in + a_input u
  and the router and the experts see y = x + input_shift p_in.

Nothing here imports torch: tests/launcher/export_dynamics_test.py runs it bare.
"""

import math

# The coefficients each form reads (the others are not part of its computation).
FORM_KEYS = {
    "plain": ("input_shift",),
    "momentum": ("a_state", "a_input", "a_out", "input_shift"),
    "adam": ("a_state", "a_input", "beta1", "beta2", "eps", "eps_inside_sqrt", "kappa", "gamma",
             "adam_sign", "input_shift"),
}

# Relative tolerance of the cross-check: the two sides evaluate the same closed forms in double
# precision, possibly in another order.
CROSS_CHECK_RTOL = 1e-12


class ResidualMismatchError(ValueError):
    """momoe's exported coefficients ("residual") differ from the ones the papers give."""


def _number(d, key, where):
    if key not in d:
        raise ValueError(f"{where}: no {key!r} (an export from an older momoe-export? re-export)")
    value = d[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}.{key} = {value!r} is not a finite number")
    return float(value)


def robust_parameters(rho, lipschitz, strong_convexity, where="robust"):
    """(mu, gamma, alpha) of Robust MomentumSMoE from the paper's (p, L, m), Eq. 17 (the paper's
    scalar p is written rho here, against a clash with the state p_t):

        k     = L / m
        gamma = k (1 - rho)^2 (1 + rho) / L
        mu    = k rho^3 / (k - 1)
        alpha = rho^3 / ((k - 1) (1 - rho)^2 (1 + rho))

    They need k > 1 and rho != 1; momoe allows rho in (0, 1)."""
    if not (lipschitz > 0 and strong_convexity > 0):
        raise ValueError(f"{where}: L = {lipschitz} and m = {strong_convexity} must be positive")
    k = lipschitz / strong_convexity
    if not k > 1:
        raise ValueError(f"{where}: k = L / m = {k} must exceed 1 (Eq. 17 divides by k - 1)")
    if not 0 < rho < 1:
        raise ValueError(f"{where}: rho = {rho} must be in (0, 1)")
    gamma = k * (1 - rho) ** 2 * (1 + rho) / lipschitz
    mu = k * rho ** 3 / (k - 1)
    alpha = rho ** 3 / ((k - 1) * (1 - rho) ** 2 * (1 + rho))
    return mu, gamma, alpha


def _heavy_ball(mu, gamma, paper):
    """(a_state, a_input, a_out) of the heavy-ball update in either convention.

    Paper, Eq. 10 with f = -u (Eq. 9):   p_t = u + mu p_{t-1};  x_{t+1} = x_t + gamma p_t
        -> the state is p:  a_state = mu, a_input = 1, a_out = gamma.
    Reference code (Fig. 11 and the authors' code, f = +u):
        m_t = mu m_{t-1} + gamma u;  x_{t+1} = x_t - m_t   (m_t = -gamma p_t of Fig. 11)
        -> the state is m:  a_state = mu, a_input = gamma, a_out = -1.
    (With mu = 0, gamma = 1 the paper form is SMoE's x + u; the reference code's is x - u.)"""
    if paper:
        return mu, 1.0, gamma
    return mu, gamma, -1.0


def residual_coefficients(dynamics, where="dynamics"):
    """The coefficients (model.MoeLayer's forms above) of one MoE block from its "dynamics"
    record, by the papers' equations. Returns {"form": ..., and FORM_KEYS[form]}."""
    kind = dynamics.get("kind")
    convention = dynamics.get("convention")
    if convention not in ("paper", "reference_code"):
        raise ValueError(f"{where}.convention = {convention!r} is not 'paper' or 'reference_code'")
    paper = convention == "paper"

    if kind == "plain":
        # SMoE, Eq. 2: x_{t+1} = x_t + u(x_t). No f and no state: the convention does not apply,
        # and the state of an earlier momentum layer passes through.
        return {"form": "plain", "input_shift": 0.0}

    if kind == "heavy_ball":
        mu, gamma = _number(dynamics, "mu", where), _number(dynamics, "gamma", where)
        a_state, a_input, a_out = _heavy_ball(mu, gamma, paper)
        return {"form": "momentum", "a_state": a_state, "a_input": a_input, "a_out": a_out,
                "input_shift": 0.0}

    if kind == "robust":
        # mu, gamma, alpha from the configured (rho, L, m) by Eq. 17, never from the recorded
        # "mu", "gamma", "alpha" (momoe's values: cross-checked only).
        mu, gamma, alpha = robust_parameters(_number(dynamics, "rho", where),
                                             _number(dynamics, "lipschitz", where),
                                             _number(dynamics, "strong_convexity", where),
                                             where)
        a_state, a_input, a_out = _heavy_ball(mu, gamma, paper)
        # Eq. 18 in momentum form: y_t = x_t + alpha gamma p_{t-1}; p_t = -f(y_t) + mu p_{t-1};
        # x_{t+1} = x_t + gamma p_t (router and experts see y; the residual base stays x).
        # Paper: the state is p -> input_shift = alpha gamma. Reference code (Fig. 13 with the
        # buffer m = -gamma p, as for heavy ball): y = x - alpha m -> input_shift = -alpha.
        shift = alpha * gamma if paper else -alpha
        return {"form": "momentum", "a_state": a_state, "a_input": a_input, "a_out": a_out,
                "input_shift": shift}

    if kind == "adam":
        mu, gamma = _number(dynamics, "mu", where), _number(dynamics, "gamma", where)
        if not isinstance(dynamics.get("adam"), dict):
            raise ValueError(f"{where}: no 'adam' settings (an export from an older momoe-export? "
                             "re-export)")
        adam = dynamics["adam"]
        aw = where + ".adam"
        placement = adam.get("eps_placement")
        if placement not in ("outside_sqrt", "inside_sqrt"):
            raise ValueError(f"{aw}.eps_placement = {placement!r} is not 'outside_sqrt' or "
                             "'inside_sqrt'")
        # AdamSMoE (Sec. 3.1; beta1 is the paper's mu of the first moment, beta2 its beta):
        #   p_t = beta1 p_{t-1} + (1 - beta1) (-f(x_t));  m_t = beta2 m_{t-1} + (1 - beta2) f (.) f
        #   x_{t+1} = x_t + gamma / (sqrt(m_t) + eps) (.) p_t - kappa x_t
        # Paper, f = -u: the first moment is +(1 - beta1) u -> adam_sign = +1.
        # Reference code (Fig. 12, f = +SMoE(x): gradient = -(1 - mu) SMoE(x) + ...; the authors'
        # code: h - gamma1 p1 / sqrt(v1 + eps)) -> adam_sign = -1.
        # The moments start at zero (the first MoE layer only), so m = (1 - beta1) u etc.
        # The heavy-ball state handed to the later layers is updated as a heavy-ball layer with
        # this block's mu and gamma would (the code's mhb = mu 0 + gamma2 u_1; spec 3.4).
        a_state, a_input, _ = _heavy_ball(mu, gamma, paper)
        return {"form": "adam", "a_state": a_state, "a_input": a_input,
                "beta1": _number(adam, "beta1", aw), "beta2": _number(adam, "beta2", aw),
                "eps": _number(adam, "eps", aw), "eps_inside_sqrt": placement == "inside_sqrt",
                "kappa": _number(adam, "kappa", aw), "gamma": _number(adam, "gamma", aw),
                "adam_sign": 1.0 if paper else -1.0, "input_shift": 0.0}

    raise ValueError(f"{where}.kind = {kind!r} is not 'plain', 'heavy_ball', 'adam' or 'robust'")


def _close(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return math.isclose(a, b, rel_tol=CROSS_CHECK_RTOL, abs_tol=1e-300)


def check_residual(derived, dynamics, residual, where="block"):
    """Raises ResidualMismatchError, naming both values, where momoe's exported coefficients
    (`residual`) or its recorded Robust mu/gamma/alpha (`dynamics`) differ from the `derived`
    ones (residual_coefficients(dynamics))."""
    diffs = []
    if residual.get("form") != derived["form"]:
        diffs.append(f"form: momoe exported {residual.get('form')!r}, the papers give "
                     f"{derived['form']!r}")
    else:
        for key in FORM_KEYS[derived["form"]]:
            if key not in residual:
                diffs.append(f"{key}: momoe exported none, the papers give {derived[key]!r}")
            elif not _close(residual[key], derived[key]):
                diffs.append(f"{key}: momoe exported {residual[key]!r}, the papers give "
                             f"{derived[key]!r}")
    if dynamics.get("kind") == "robust":
        recorded = {k: dynamics[k] for k in ("mu", "gamma", "alpha") if k in dynamics}
        mu, gamma, alpha = robust_parameters(float(dynamics["rho"]), float(dynamics["lipschitz"]),
                                             float(dynamics["strong_convexity"]))
        for key, value in (("mu", mu), ("gamma", gamma), ("alpha", alpha)):
            if key in recorded and not _close(recorded[key], value):
                diffs.append(f"robust {key}: momoe recorded {recorded[key]!r}, Eq. 17 gives "
                             f"{value!r}")
    if diffs:
        raise ResidualMismatchError(
            f"{where}: momoe's residual coefficients differ from those derived from the papers' "
            f"(kind {dynamics.get('kind')!r}, convention {dynamics.get('convention')!r}): "
            + "; ".join(diffs))


def check_export(cfg):
    """check_residual for every MoE block of a config.json that records "residual"."""
    for i, block in enumerate(cfg["blocks"]):
        if block.get("type") == "moe" and "residual" in block:
            where = f"blocks[{i}]"
            derived = residual_coefficients(block["dynamics"], where + ".dynamics")
            check_residual(derived, block["dynamics"], block["residual"], where)
