"""Checks of ``preconditioned_gd.relu`` (see also :mod:`verify.checks.preconditioned_gd.single_layer`).

Contains
--------
``preconditioned_gd.relu.mc_loss``
    ReLU attention (Ahn, Cheng, Daneshmand, Sra 2023, Theorem 5): Monte Carlo of the forward pass at A*, 0.8 A*,
    1.2 A* and a random A vs f(A) = c ||A||_F^2 + tr A + d; the linear-attention scale is not the minimiser.
    The configurations are named settings: ``d`` and ``n`` (equal-length lists, paired) and ``samples``
    (prompts per pair, or one value for all).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.models.linear_transformer_monte_carlo import predict_query
from verify.outcomes import z_score
from verify.settings import Setting
from verify.stats import batch_mean, chunks, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.preconditioned_gd import sample_prompts


# -- (d') ReLU attention (Theorem 5) ---------------------------------------------------------------------
def _relu_layer(d: int, A: np.ndarray):
    """P = E_{d+1,d+1}, Q = [[A, 0], [0, 0]] (Theorem 5's convention: no minus sign)."""
    P = np.zeros((1, d + 1, d + 1))
    P[0, d, d] = 1.0
    Q = np.zeros((1, d + 1, d + 1))
    Q[0, :d, :d] = A
    return P, Q


#: Prompts per configuration (d, n) of ``preconditioned_gd.relu.mc_loss`` by profile. The
#: weakest control is "the linear-attention scale is the minimiser" at d = 3, n = 4: its
#: exact paired gap f(A_lin) - f(A*) = 0.0325 against a per-prompt s.d. of the paired
#: difference of 0.88 (measured, seed 0) gives an expected z of 0.037 sqrt(N): 11.7 at 1e5,
#: 20 at 3e5 (threshold 5.36); d = 5, n = 20: gap 0.405, s.d. 2.28, expected z 56 at 1e5.
RELU_PROMPTS = {"quick": {(5, 20): 100_000, (3, 4): 300_000},
                "full": {(5, 20): 1_000_000, (3, 4): 1_000_000, (10, 40): 1_000_000}}


def _relu_default(profile: str, j: int) -> tuple:
    """The profile's d (j = 0), n (j = 1) or prompts (j = 2) of :data:`RELU_PROMPTS`, in order."""
    return tuple((*k, v)[j] for k, v in RELU_PROMPTS[profile].items())


def _relu_configs(ctx) -> dict:
    """``{(d, n): prompts}`` from the settings ``d``, ``n`` (paired with d) and ``samples``."""
    ds, ns, totals = ctx.setting("d"), ctx.setting("n"), ctx.setting("samples")
    if len(totals) == 1:
        totals = totals * len(ds)
    if len(totals) != len(ds):
        raise ValueError(f"samples: expected one value or one per (d, n) pair ({len(ds)}), got {len(totals)}")
    if len(set(zip(ds, ns))) != len(ds):
        raise ValueError(f"d: the (d, n) pairs must be distinct, got {list(zip(ds, ns))}")
    return {(d, n): total for d, n, total in zip(ds, ns, totals)}


@check("preconditioned_gd.relu.mc_loss",
       covers=["preconditioned_gd.relu.loss", "preconditioned_gd.relu.optimal_scale",
               "preconditioned_gd.relu.optimal_loss"],
       method="monte_carlo",
       title="ReLU attention (Theorem 5): Monte Carlo of the forward pass at A*, 0.8 A*, 1.2 A* and a random A "
             "vs f(A) = c ||A||_F^2 + tr A + d; the linear-attention scale is not the minimiser",
       settings=[Setting("d", "ints", quick=_relu_default("quick", 0), full=_relu_default("full", 0), low=1, high=200,
                         doc="dimensions d, paired with n (one Monte Carlo configuration per pair)"),
                 Setting("n", "ints", quick=_relu_default("quick", 1), full=_relu_default("full", 1), low=1,
                         high=10_000, doc="context lengths n, one per d", paired_with="d"),
                 Setting("samples", "ints", quick=_relu_default("quick", 2), full=_relu_default("full", 2),
                         low=1000, high=10**8, doc="prompts per (d, n) pair (one value: the same for every pair)")])
def relu_mc_loss(ctx):
    """Controls, each with its expected z (the exact difference between the wrong and the
    true form over the measured standard error of the same statistic; stated per seed):

    - the linear-attention scale ``-n/(n+d+1)`` as the minimiser (paired gap 0);
    - the linear-attention curvature ``(n+d+1)/n`` in place of ``(n+2d+3)/(4n)``, tested on
      the paired gap at ``0.8 A*`` (a fixed matrix: on the random ``A`` the wrong and the
      true gap differ by ``(c_lin - c)(||A||^2 - ||A*||^2)``, which a draw with ``||A|| ~
      ||A*||`` makes vanish; seeds 1 and 3 drew such matrices).

    Quick profile (:data:`RELU_PROMPTS`), seeds 0-19: 20/20 pass, worst discrepancy/tolerance 0.682
    (seed 6, threshold 5.36); controls' expected z at least 10.1 and 100 (d = 5) and 3.5 and 49 (d = 3)
    times the threshold. The d = 3 scale control is below 5 x, so no size is reduced; the forward pass
    reads only the query column of the layer
    (:func:`~verify.models.linear_transformer_monte_carlo.predict_query`, the same values to round-off),
    about 0.8 s of CPU instead of 3.4 s (seed 0, the same machine and load).
    """
    rng = ctx.rng
    relu_loss = theory.get("preconditioned_gd.relu.loss")
    prompts = _relu_configs(ctx)
    zs, controls, per = [], [], []
    for (d, n), total in prompts.items():
        a_star = _cf("preconditioned_gd.relu.optimal_scale", n=n, d=d)
        f_star = _cf("preconditioned_gd.relu.optimal_loss", n=n, d=d)
        a_lin = -n / (n + d + 1)  # Theorem 1's isotropic optimum in this sign convention
        mats = {"A*": a_star * np.eye(d), "0.8 A*": 0.8 * a_star * np.eye(d), "1.2 A*": 1.2 * a_star * np.eye(d),
                "random A": 0.6 * rng.standard_normal((d, d)), "linear-attention scale": a_lin * np.eye(d)}
        layers = {k: _relu_layer(d, A) for k, A in mats.items()}
        est = batch_mean()
        for k in chunks(total, 10_000):
            pr = sample_prompts(rng, np.eye(d), n, k)
            Z0 = pr.tokens()
            # the forward pass's query column only (predict_query: the same values as predict to round-off)
            e = {name: (predict_query(Z0, P, Q, activation="relu") - pr.target) ** 2 for name, (P, Q) in layers.items()}
            est.add(np.stack([e["A*"]] + [e[name] - e["A*"] for name in mats if name != "A*"], axis=1))
        r = est.result()
        names = [name for name in mats if name != "A*"]
        exact = {name: relu_loss(n=n, A=A) for name, A in mats.items()}
        zs.append(z_score(r.mean[0], r.se[0], f_star))
        zs.append(z_score(r.mean[0], r.se[0], exact["A*"]))
        for j, name in enumerate(names, start=1):
            zs.append(z_score(r.mean[j], r.se[j], exact[name] - exact["A*"]))
        j_lin = 1 + names.index("linear-attention scale")
        gap_lin = exact["linear-attention scale"] - exact["A*"]
        exp_lin = abs(gap_lin) / r.se[j_lin]
        controls.append(Control(f"d={d}, n={n}: linear-attention scale -n/(n+d+1) as the minimiser "
                                f"(paired gap = 0; expected z {exp_lin:.1f})",
                                abs(z_score(r.mean[j_lin], r.se[j_lin], 0.0)), 0.0, expected=float(exp_lin)))
        # a wrong curvature: c of linear attention, (n+d+1)/n, in place of (n+2d+3)/(4n)
        c_lin = (n + d + 1) / n
        wrong = {name: c_lin * np.sum(A**2) + np.trace(A) + d for name, A in mats.items()}
        j_08 = 1 + names.index("0.8 A*")
        wrong_gap = wrong["0.8 A*"] - wrong["A*"]
        exp_curv = abs(wrong_gap - (exact["0.8 A*"] - exact["A*"])) / r.se[j_08]
        controls.append(Control(f"d={d}, n={n}: linear-attention curvature (n+d+1)/n in f(A), paired gap at "
                                f"0.8 A* (expected z {exp_curv:.0f})",
                                abs(z_score(r.mean[j_08], r.se[j_08], wrong_gap)), 0.0, expected=float(exp_curv)))
        per.append({"d": d, "n": n, "prompts": total, "f_star": f_star, "mc_at_A_star": float(r.mean[0]),
                    "se": float(r.se[0]),
                    "paired_gaps_mc": dict(zip(names, r.mean[1:].tolist())),
                    "paired_gaps_exact": {name: exact[name] - exact["A*"] for name in names},
                    "paired_gaps_se": dict(zip(names, r.se[1:].tolist())),
                    "expected control z": {"linear-attention scale": float(exp_lin),
                                           "linear-attention curvature": float(exp_curv)}})
    z_crit = z_threshold(len(zs))
    controls = [dataclasses.replace(c, tolerance=z_crit) for c in controls]
    return Outcome(
        measured=[p["mc_at_A_star"] for p in per], predicted=[p["f_star"] for p in per],
        discrepancy=float(max(abs(z) for z in zs)), tolerance=z_crit,
        criterion=(f"max |z| over {len(zs)} comparisons: MC loss at A* vs optimal_loss and loss(A*), paired MC "
                   "gaps f(A) - f(A*) at 0.8 A*, 1.2 A*, a random A and the linear-attention scale vs the "
                   f"exact gaps of relu.loss; < z_threshold({len(zs)}) = {z_crit:.2f} (family-wise false alarm "
                   f"1e-6); prompts per (d, n): {dict((str(k), v) for k, v in prompts.items())}. Controls: "
                   "expected z (exact gap of the wrong form over the measured s.e.) "
                   + ", ".join(f"{p['expected control z']['linear-attention scale']:.0f} and "
                               f"{p['expected control z']['linear-attention curvature']:.0f} (d={p['d']}, n={p['n']})"
                               for p in per)),
        controls=controls, details={"prompts_per_config": {str(k): v for k, v in prompts.items()},
                                    "per_config": per},
    )


# -- (d'') the proof of Theorem 5: eq. 23 drops a term that is not constant ---------------------------------
def _lower_bound_samples(rng, n: int, d: int, total: int, points: dict, pair: tuple):
    """Mean and s.e. of the per-sample ``(r + w^T D x)^2`` for each ``(s, D)`` of ``points`` (the same
    samples for all), ``r = (1/n) sum_i (w^T x_i) sigma(x_i^T diag(s) x)``: the integrand of
    ``f_lower(Sigma, D)`` (App. A.4, step 3) with ``Sigma = diag(s)``; a last column holds the paired
    difference between the points named in ``pair``."""
    names = list(points)
    ia, ib = names.index(pair[0]), names.index(pair[1])
    est = batch_mean()
    for k in chunks(total, 20_000):
        w = rng.standard_normal((k, d))
        X = rng.standard_normal((k, n, d))
        x = rng.standard_normal((k, d))
        yw = np.einsum("bid,bd->bi", X, w)                                     # w^T x_i
        cols = []
        for s, D in points.values():
            r = np.mean(yw * np.maximum(np.einsum("bid,d,bd->bi", X, s, x), 0.0), axis=1)
            cols.append((r + np.einsum("bd,d,bd->b", w, D, x)) ** 2)
        cols.append(cols[ia] - cols[ib])
        est.add(np.stack(cols, axis=1))
    return est.result()


@check("preconditioned_gd.relu.eq23_dropped_term",
       covers=["preconditioned_gd.relu.loss", "preconditioned_gd.relu.optimal_loss"],
       method="monte_carlo",
       title="Theorem 5's proof: the lower bound f_lower(Sigma, D) of App. A.4 carries tr(D^2), which eq. 23 drops as "
             "a constant; it varies with the SVD factors of A (0 to d) and f_lower reaches 0 < f*",
       refutes={"Ahn et al. 2023, eq. 23 (Theorem 5 proof, App. A.4)":
                "The '+ const' of eq. 23 is E(w*^T D x)^2 = tr(D^2), D = diag(U^T V) from the SVD A = U Sigma V^T: it "
                "is not constant (it ranges over [0, d] and is not even a function of A: at A = 0 every orthogonal "
                "U = V gives d, a cyclic U^T V gives 0), so eq. 24 is not f_lower up to a constant, and the Jensen "
                "lower bound f >= f_lower = c tr(Sigma^2) + tr(Sigma D) + tr(D^2) cannot certify the minimum: its "
                "infimum is 0 < f* = d(2d+3)/(n+2d+3). Theorem 5 itself holds: eq. 24 + d is exactly the loss "
                "f(A) = c ||A||_F^2 + tr A + d (preconditioned_gd.relu.loss), a strictly convex quadratic whose "
                "minimiser is the stated A*."},
       settings=[Setting("d", "ints", quick=(5, 3), full=(5, 3, 10), low=1, high=200,
                         doc="dimensions d, paired with n"),
                 Setting("n", "ints", quick=(20, 4), full=(20, 4, 40), low=1, high=10_000,
                         doc="context lengths n, one per d", paired_with="d"),
                 Setting("samples", "int", quick=20_000, full=1_000_000, low=1000, high=10**8,
                         doc="samples per (d, n) pair (the same samples for every point: paired)")])
def eq23_dropped_term(ctx):
    """App. A.4 bounds the ReLU loss below by Jensen over random signs, ``f(A) >= f_lower(Sigma, D)
    = E[(1/n) sum_i (w^T x_i) sigma(x_i^T Sigma x) + w^T D x]^2`` with ``A = U Sigma V^T`` and ``D =
    diag(U^T V)``, expands it in eq. 23 "+ const" and minimises eq. 24 ``= c tr(Sigma^2) +
    tr(Sigma D)``. Expanding the square, the dropped term is ``E(w^T D x)^2 = tr(D^2)``, so exactly
    ``f_lower = c tr(Sigma^2) + tr(Sigma D) + tr(D^2)``; ``c tr(Sigma^2) = ||A||^2 c`` is read from
    the registered ``relu.loss`` (``f(A) - tr A - d``).

    Monte Carlo of ``f_lower``'s definition (paired: the same samples) at five ``(Sigma, D)``, with
    ``s* = 2n/(n+2d+3)``:

    - ``Sigma = s* I, D = -I`` (the proof's minimiser ``A* = -s* I``, ``U = -I, V = I``): ``f*``;
    - ``Sigma = s* I, D = 0`` (``A = s* P``, ``P`` a cyclic permutation, ``U = P, V = I``);
    - ``Sigma = 0, D = I`` and ``Sigma = 0, D = 0``: the same ``A = 0`` with two SVDs (d and 0);
    - ``Sigma = 0.3 s* I, D = 0``: ``f_lower = 0.09 n d/(n+2d+3)``, far below ``f*``;
    - a random ``A``'s numpy SVD (``0 < tr(D^2) < d``).

    Each against the exact ``f_lower`` (z; the deterministic ``Sigma = 0, D = 0`` is 0 per sample).
    Controls (expected z: the exact gap between the wrong and the true value over the measured s.e.):

    - eq. 23 as printed, "tr(D^2) is a constant": the paired gap between ``D = -I`` and ``D = 0`` at
      ``Sigma = s* I`` must then equal eq. 24's gap ``-d s*``; the truth is ``-d s* + d``;
    - the proof's conclusion from eq. 24, ``f_lower >= f*``, at ``Sigma = 0.3 s* I, D = 0``.

    Measured, quick profile (2e4 samples per pair), seeds 0-19: 20/20 pass, worst |z| 3.89 against
    5.36; the controls' smallest z 66 ("constant", n = 4) and 311 ("f_lower >= f*", n = 20). Full
    profile (1e6 samples, d = 10, n = 40 added), seeds 0-1: 2/2, worst |z| 1.68 against 5.43, controls
    >= 523.
    """
    rng = ctx.rng
    relu_loss = theory.get("preconditioned_gd.relu.loss")
    ds, ns, total = ctx.setting("d"), ctx.setting("n"), ctx.setting("samples")
    zs, controls, per = [], [], []
    for d, n in zip(ds, ns):
        s_star = -_cf("preconditioned_gd.relu.optimal_scale", n=n, d=d)
        f_star = _cf("preconditioned_gd.relu.optimal_loss", n=n, d=d)
        one, zero = np.ones(d), np.zeros(d)
        U, sv, Vt = np.linalg.svd(rng.standard_normal((d, d)))
        points = {"Sigma = s* I, D = -I": (s_star * one, -one), "Sigma = s* I, D = 0": (s_star * one, zero),
                  "Sigma = 0, D = I": (zero, one), "Sigma = 0, D = 0": (zero, zero),
                  "Sigma = 0.3 s* I, D = 0": (0.3 * s_star * one, zero),
                  "random A (numpy SVD)": (0.8 * sv / sv.max(), np.diag(U.T @ Vt.T))}

        def exact(s, D):
            quad = relu_loss(n=n, A=np.diag(s)) - s.sum() - d          # c tr(Sigma^2)
            return quad + float(s @ D) + float(D @ D)

        def eq24(s, D):
            return exact(s, D) - float(D @ D)

        pair = ("Sigma = s* I, D = -I", "Sigma = s* I, D = 0")
        r = _lower_bound_samples(rng, n, d, total, points, pair)
        names = list(points)
        want = {k: exact(*points[k]) for k in names}
        for j, k in enumerate(names):
            if r.se[j] > 0:
                zs.append((r.mean[j] - want[k]) / r.se[j])
            elif abs(r.mean[j] - want[k]) > 1e-12:  # the deterministic point must be exact
                zs.append(np.inf)
        # control 1: the paired gap between D = -I and D = 0 at Sigma = s* I, against eq. 24's gap
        claim = eq24(*points[pair[0]]) - eq24(*points[pair[1]])
        truth = want[pair[0]] - want[pair[1]]
        gap, gap_se = float(r.mean[-1]), float(r.se[-1])
        zs.append((gap - truth) / gap_se)
        controls.append(Control(f"d={d}, n={n}: eq. 23 as printed (tr(D^2) constant): paired gap f_lower(D = -I) - "
                                f"f_lower(D = 0) at Sigma = s* I equal to eq. 24's {claim:.3f} (expected z "
                                f"{abs(truth - claim) / gap_se:.0f})", abs(gap - claim) / gap_se, 0.0,
                                expected=abs(truth - claim) / gap_se))
        j = names.index("Sigma = 0.3 s* I, D = 0")
        controls.append(Control(f"d={d}, n={n}: eq. 24's conclusion f_lower >= f* = {f_star:.3f} at Sigma = 0.3 s* I, "
                                f"D = 0 (expected z {(f_star - want[names[j]]) / r.se[j]:.0f})",
                                float((f_star - r.mean[j]) / r.se[j]), 0.0,
                                expected=float((f_star - want[names[j]]) / r.se[j])))
        per.append({"d": d, "n": n, "s_star": s_star, "f_star": f_star, "samples": total,
                    "f_lower_mc": dict(zip(names, r.mean.tolist())), "f_lower_se": dict(zip(names, r.se.tolist())),
                    "f_lower_exact": want, "eq24_printed": {k: eq24(*points[k]) for k in names},
                    "dropped_term_tr_D2": {k: float(points[k][1] @ points[k][1]) for k in names},
                    "true_loss_f(A)_minus_eq24": float(d),
                    "paired gap D=-I vs D=0": {"mc": gap, "se": gap_se, "exact": truth, "eq24": claim}})
    z_crit = z_threshold(len(zs))
    controls = [dataclasses.replace(c, tolerance=z_crit) for c in controls]
    return Outcome(
        measured=[p["f_lower_mc"] for p in per], predicted=[p["f_lower_exact"] for p in per],
        discrepancy=float(np.max(np.abs(zs))), tolerance=z_crit,
        criterion=(f"max |z| over {len(zs)} comparisons: Monte Carlo of f_lower(Sigma, D) (App. A.4's definition, "
                   "paired samples) against c tr(Sigma^2) + tr(Sigma D) + tr(D^2) at six (Sigma, D) per (d, n), and "
                   f"the paired gap between D = -I and D = 0; < z_threshold({len(zs)}) = {z_crit:.2f} (family-wise "
                   f"false alarm 1e-6); {total} samples per (d, n). The true loss is eq. 24 + d = relu.loss for "
                   "every A"),
        controls=controls, details={"per_config": per},
    )
