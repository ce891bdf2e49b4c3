#!/usr/bin/env python3
"""python/momoe_torch/dynamics.py: the residual coefficients derived from the papers' quantities
(kind, convention, mu, gamma, Robust's rho/L/m, the Adam settings), checked two ways without
momoe or torch:

1. by hand values for every kind x convention (the numbers worked out from the equations in
   spec/momentum-smoe.md 2-4, written here, not computed by the code under test);
2. by running a few MoE layers of a bare residual chain (x_{t+1} = the layer's output) with the
   coefficients and the module's per-element forms, against the papers' literal updates: Eq. 11
   (heavy ball, paper), Fig. 11 (reference code), Eq. 16 (Robust, paper), Fig. 13 (Robust, the
   pseudocode's sign), Sec. 3.1 and Fig. 12 (AdamSMoE).

Then the cross-check of momoe's exported "residual" and the refusals.

usage: export_dynamics_test.py [PYTHON_DIR] [unittest args]   (default: this checkout's
python/)
"""

import importlib.util
import math
import os
import sys
import unittest

PYTHON_DIR = (sys.argv.pop(1) if len(sys.argv) > 1 and os.path.isdir(sys.argv[1]) else
              os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
# dynamics.py by path: the package's __init__ imports torch, this test needs none.
_spec = importlib.util.spec_from_file_location(
    "momoe_dynamics", os.path.join(PYTHON_DIR, "momoe_torch", "dynamics.py"))
dyn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dyn)

ADAM = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "eps_placement": "outside_sqrt", "kappa": 0.0,
        "gamma": 0.8}


def dynamics(kind, convention, **extra):
    d = {"kind": kind, "convention": convention}
    d.update(extra)
    return d


def layer(c, x, p, smoe):
    """One MoE layer with coefficients `c`, as model.MoeLayer computes it (dynamics.py's forms),
    on scalars: the input x (also the residual base), the state p, u = smoe(y)."""
    y = x + c["input_shift"] * p
    u = smoe(y)
    if c["form"] == "plain":
        return x + u, p
    if c["form"] == "momentum":
        p_out = c["a_state"] * p + c["a_input"] * u
        return x + c["a_out"] * p_out, p_out
    m = (1 - c["beta1"]) * u
    v = (1 - c["beta2"]) * u * u
    denom = math.sqrt(v + c["eps"]) if c["eps_inside_sqrt"] else math.sqrt(v) + c["eps"]
    out = (1 - c["kappa"]) * x + c["adam_sign"] * c["gamma"] * m / denom
    return out, c["a_state"] * p + c["a_input"] * u


def chain(c, x, smoe_per_layer):
    """x after the MoE layers of a bare residual chain, the state zero before the first."""
    p = 0.0
    for smoe in smoe_per_layer:
        x, p = layer(c, x, p, smoe)
    return x


# SMoE outputs that depend on the layer's input (so that the robust shift matters) and differ
# per layer.
SMOES = [lambda y: 0.3 + 0.5 * math.sin(y), lambda y: -0.2 + 0.4 * y, lambda y: 0.7 * math.cos(y),
         lambda y: 0.1 - 0.3 * y * y]


class HandValues(unittest.TestCase):
    def check(self, d, want):
        got = dyn.residual_coefficients(d)
        self.assertEqual(set(got), set(want), d)
        for key, value in want.items():
            if isinstance(value, float):
                self.assertAlmostEqual(got[key], value, places=14, msg=f"{key} of {d}")
            else:
                self.assertEqual(got[key], value, f"{key} of {d}")

    def test_plain(self):
        # Eq. 2: x + u, whatever the convention (no f, no state).
        for conv in ("paper", "reference_code"):
            self.check(dynamics("plain", conv), {"form": "plain", "input_shift": 0.0})

    def test_heavy_ball(self):
        # Paper (Eq. 10, f = -u): p = u + 0.7 p; out = x + 1.5 p.
        self.check(dynamics("heavy_ball", "paper", mu=0.7, gamma=1.5),
                   {"form": "momentum", "a_state": 0.7, "a_input": 1.0, "a_out": 1.5,
                    "input_shift": 0.0})
        # Reference code: m = 0.7 m + 1.5 u; out = x - m.
        self.check(dynamics("heavy_ball", "reference_code", mu=0.7, gamma=1.5),
                   {"form": "momentum", "a_state": 0.7, "a_input": 1.5, "a_out": -1.0,
                    "input_shift": 0.0})

    def test_robust(self):
        # rho 0.5, L 2, m 1: k = 2; gamma = 2 * 0.25 * 1.5 / 2 = 0.375; mu = 2 * 0.125 / 1 = 0.25;
        # alpha = 0.125 / (1 * 0.25 * 1.5) = 1/3; alpha gamma = 0.125. The recorded mu, gamma and
        # alpha (momoe's) are not read: nonsense here changes nothing.
        raw = {"rho": 0.5, "lipschitz": 2.0, "strong_convexity": 1.0, "mu": 9.0, "gamma": 9.0,
               "alpha": 9.0}
        self.check(dynamics("robust", "paper", **raw),
                   {"form": "momentum", "a_state": 0.25, "a_input": 1.0, "a_out": 0.375,
                    "input_shift": 0.125})
        self.check(dynamics("robust", "reference_code", **raw),
                   {"form": "momentum", "a_state": 0.25, "a_input": 0.375, "a_out": -1.0,
                    "input_shift": -1.0 / 3.0})
        # rho 0.2, L 10, m 2: k = 5; gamma = 5 * 0.64 * 1.2 / 10 = 0.384; mu = 5 * 0.008 / 4 =
        # 0.01; alpha = 0.008 / (4 * 0.64 * 1.2) = 1/384; alpha gamma = 0.001.
        raw = {"rho": 0.2, "lipschitz": 10.0, "strong_convexity": 2.0}
        self.check(dynamics("robust", "paper", **raw),
                   {"form": "momentum", "a_state": 0.01, "a_input": 1.0, "a_out": 0.384,
                    "input_shift": 0.001})
        self.check(dynamics("robust", "reference_code", **raw),
                   {"form": "momentum", "a_state": 0.01, "a_input": 0.384, "a_out": -1.0,
                    "input_shift": -1.0 / 384.0})

    def test_adam(self):
        # Sec. 3.1 with f = -u: out = (1 - kappa) x + gamma (1 - beta1) u / (sqrt(v) + eps);
        # the heavy-ball state handed on is p = u + mu p (paper) or m = mu m + gamma u (code).
        common = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "kappa": 0.0, "gamma": 0.8,
                  "input_shift": 0.0, "form": "adam"}
        self.check(dynamics("adam", "paper", mu=0.7, gamma=1.5, adam=ADAM),
                   dict(common, a_state=0.7, a_input=1.0, eps_inside_sqrt=False, adam_sign=1.0))
        # Fig. 12 / the authors' code (f = +u), with their eps inside the sqrt and kappa 1.
        code = dict(ADAM, eps_placement="inside_sqrt", kappa=1.0)
        self.check(dynamics("adam", "reference_code", mu=0.7, gamma=1.5, adam=code),
                   dict(common, a_state=0.7, a_input=1.5, eps_inside_sqrt=True, kappa=1.0,
                        adam_sign=-1.0))


class PapersUpdates(unittest.TestCase):
    """The coefficients in the module's forms reproduce the papers' literal updates."""

    def assertSame(self, a, b, what):
        self.assertTrue(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), f"{what}: {a} != {b}")

    def test_plain_is_eq2(self):
        for conv in ("paper", "reference_code"):
            c = dyn.residual_coefficients(dynamics("plain", conv))
            x = 0.4
            want = x
            for smoe in SMOES:
                want = want + smoe(want)  # Eq. 2
            self.assertSame(chain(c, x, SMOES), want, f"plain, {conv}")

    def test_heavy_ball_paper_is_eq11(self):
        mu, gamma = 0.7, 1.5
        c = dyn.residual_coefficients(dynamics("heavy_ball", "paper", mu=mu, gamma=gamma))
        # Eq. 11: x_{t+1} = x_t - gamma f(x_t) + mu (x_t - x_{t-1}), f = -u, x_0 = x_1 (p_0 = 0).
        prev = x = 0.4
        for smoe in SMOES:
            prev, x = x, x + gamma * smoe(x) + mu * (x - prev)
        self.assertSame(chain(c, 0.4, SMOES), x, "heavy ball, paper")

    def test_heavy_ball_reference_code_is_fig11(self):
        mu, gamma = 0.7, 1.5
        c = dyn.residual_coefficients(dynamics("heavy_ball", "reference_code", mu=mu, gamma=gamma))
        x, momentum = 0.4, 0.0
        for smoe in SMOES:  # Fig. 11, literally (f = +SMoE(x))
            momentum = -smoe(x) + mu * momentum
            x = x + gamma * momentum
        self.assertSame(chain(c, 0.4, SMOES), x, "heavy ball, reference code")

    def test_robust_paper_is_eq16(self):
        rho, big_l, m = 0.5, 2.0, 1.0
        c = dyn.residual_coefficients(
            dynamics("robust", "paper", rho=rho, lipschitz=big_l, strong_convexity=m))
        k = big_l / m  # Eq. 17, written out again here
        gamma = k * (1 - rho) ** 2 * (1 + rho) / big_l
        mu = k * rho ** 3 / (k - 1)
        alpha = rho ** 3 / ((k - 1) * (1 - rho) ** 2 * (1 + rho))
        # Eq. 16: y_t = x_t + alpha (x_t - x_{t-1}); x_{t+1} = x_t - gamma f(y_t) + mu (x_t -
        # x_{t-1}), f = -u.
        prev = x = 0.4
        for smoe in SMOES:
            y = x + alpha * (x - prev)
            prev, x = x, x + gamma * smoe(y) + mu * (x - prev)
        self.assertSame(chain(c, 0.4, SMOES), x, "robust, paper")

    def test_robust_reference_code_is_fig13(self):
        rho, big_l, m = 0.2, 10.0, 2.0
        c = dyn.residual_coefficients(
            dynamics("robust", "reference_code", rho=rho, lipschitz=big_l, strong_convexity=m))
        x, momentum = 0.4, 0.0
        for smoe in SMOES:  # Fig. 13, literally (p -> rho)
            k = big_l / m
            gamma = k * ((1 - rho) ** 2) * (1 + rho) / big_l
            mu = k * rho ** 3 / (k - 1)
            alpha = rho ** 3 / ((k - 1) * ((1 - rho) ** 2) * (1 + rho))
            y = x + alpha * gamma * momentum
            momentum = -smoe(y) + mu * momentum
            x = x + gamma * momentum
        self.assertSame(chain(c, 0.4, SMOES), x, "robust, reference code")

    def test_adam(self):
        mu, gamma = 0.7, 1.5
        for placement in ("outside_sqrt", "inside_sqrt"):
            for kappa in (0.0, 0.3, 1.0):
                adam = dict(ADAM, eps_placement=placement, kappa=kappa)
                b1, b2, eps, g = adam["beta1"], adam["beta2"], adam["eps"], adam["gamma"]

                def sqrt_eps(v):
                    return math.sqrt(v + eps) if placement == "inside_sqrt" else math.sqrt(v) + eps

                for x, u in ((0.4, 2.0), (-1.3, -0.05), (0.2, 3e-5)):
                    smoe = lambda y: u  # noqa: E731
                    # Sec. 3.1 with f = -u and zero moments (paper).
                    f = -u
                    p1 = b1 * 0 + (1 - b1) * (-f)
                    m2 = b2 * 0 + (1 - b2) * f * f
                    want = x + g / sqrt_eps(m2) * p1 - kappa * x
                    c = dyn.residual_coefficients(
                        dynamics("adam", "paper", mu=mu, gamma=gamma, adam=adam))
                    out, p = layer(c, x, 0.0, smoe)
                    self.assertSame(out, want, f"adam, paper, {placement}, kappa {kappa}")
                    self.assertSame(p, u, "adam, paper: the state handed on is p_1 = u_1")
                    # Fig. 12, literally (f = +SMoE(x); its `momentum` read as `gradient`).
                    gradient = -(1 - b1) * smoe(x) + b1 * 0.0
                    squared = b2 * 0.0 + (1 - b2) * smoe(x) ** 2
                    want = x + g / sqrt_eps(squared) * gradient - kappa * x
                    c = dyn.residual_coefficients(
                        dynamics("adam", "reference_code", mu=mu, gamma=gamma, adam=adam))
                    out, p = layer(c, x, 0.0, smoe)
                    self.assertSame(out, want, f"adam, reference code, {placement}, kappa {kappa}")
                    # The code's heavy-ball buffer: mhb = mu * 0 + gamma2 * u_1.
                    self.assertSame(p, gamma * u, "adam, reference code: the buffer handed on")


class CrossCheck(unittest.TestCase):
    def test_agreeing_residual_passes(self):
        d = dynamics("robust", "paper", rho=0.5, lipschitz=2.0, strong_convexity=1.0, mu=0.25,
                     gamma=0.375, alpha=1.0 / 3.0)
        derived = dyn.residual_coefficients(d)
        residual = {"form": "momentum", "a_state": 0.25, "a_input": 1.0, "a_out": 0.375,
                    "input_shift": 0.125}
        dyn.check_residual(derived, d, residual, "blocks[0]")
        # Plain: momoe's unused a_* (its defaults) are not compared.
        d = dynamics("plain", "paper")
        dyn.check_residual(dyn.residual_coefficients(d), d,
                           {"form": "plain", "a_state": 0.0, "a_input": 1.0, "a_out": 1.0,
                            "input_shift": 0.0})

    def test_wrong_a_out_names_both(self):
        d = dynamics("robust", "paper", rho=0.5, lipschitz=2.0, strong_convexity=1.0)
        residual = {"form": "momentum", "a_state": 0.25, "a_input": 1.0, "a_out": 1.0,
                    "input_shift": 0.125}
        with self.assertRaises(dyn.ResidualMismatchError) as e:
            dyn.check_residual(dyn.residual_coefficients(d), d, residual, "blocks[3]")
        msg = str(e.exception)
        for part in ("blocks[3]", "a_out", "momoe exported 1.0", "the papers give 0.375"):
            self.assertIn(part, msg)

    def test_wrong_adam_sign(self):
        d = dynamics("adam", "paper", mu=0.7, gamma=1.0, adam=ADAM)
        residual = dict(dyn.residual_coefficients(d), adam_sign=-1.0)
        with self.assertRaisesRegex(dyn.ResidualMismatchError,
                                    r"adam_sign: momoe exported -1.0, the papers give 1.0"):
            dyn.check_residual(dyn.residual_coefficients(d), d, residual)

    def test_wrong_recorded_robust_mu(self):
        d = dynamics("robust", "reference_code", rho=0.5, lipschitz=2.0, strong_convexity=1.0,
                     mu=0.3)
        derived = dyn.residual_coefficients(d)
        with self.assertRaisesRegex(dyn.ResidualMismatchError, r"robust mu: momoe recorded 0.3"):
            dyn.check_residual(derived, d, dict(derived))

    def test_other_form(self):
        d = dynamics("heavy_ball", "paper", mu=0.7, gamma=1.0)
        with self.assertRaisesRegex(dyn.ResidualMismatchError, r"form: momoe exported 'plain'"):
            dyn.check_residual(dyn.residual_coefficients(d), d,
                               {"form": "plain", "input_shift": 0.0})


class Refusals(unittest.TestCase):
    def test_refused(self):
        cases = [
            (dynamics("heavy_ball", "paper", mu=0.7), "'gamma'"),
            (dynamics("heavy_ball", "both", mu=0.7, gamma=1.0), "convention"),
            (dynamics("nesterov", "paper"), "kind"),
            (dynamics("adam", "paper", mu=0.7, gamma=1.0), "'adam' settings"),
            (dynamics("adam", "paper", mu=0.7, gamma=1.0,
                      adam=dict(ADAM, eps_placement="sideways")), "eps_placement"),
            (dynamics("robust", "paper", rho=0.5, lipschitz=1.0, strong_convexity=1.0), "k = "),
            (dynamics("robust", "paper", rho=1.0, lipschitz=2.0, strong_convexity=1.0), "rho"),
            (dynamics("heavy_ball", "paper", mu="0.7", gamma=1.0), "finite number"),
        ]
        for d, part in cases:
            with self.assertRaises(ValueError, msg=str(d)) as e:
                dyn.residual_coefficients(d, "blocks[1].dynamics")
            self.assertIn(part, str(e.exception))
            self.assertIn("blocks[1].dynamics", str(e.exception))


if __name__ == "__main__":
    unittest.main()
