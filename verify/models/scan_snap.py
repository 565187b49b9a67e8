"""Models of Tian, Wang, Chen, Du 2023 ("Scan and Snap"): the data model of sequence classes,
the population dynamics of the reparameterised 1-layer transformer, and a real torch 1-layer
transformer.

Y. Tian, Y. Wang, B. Chen, S. Du, *Scan and Snap: Understanding Training Dynamics and Token
Composition in 1-layer Transformer*, NeurIPS 2023.

Data model (§3.2): class ``n`` (next token ``label[n]``) has query token ``psi[n]`` and draws its
``T - 1`` contextual tokens i.i.d. from ``P[n] = P(l | n)`` (a row over the vocabulary ``[M]``).
A token in the support of exactly one class is *distinct*, of more than one *common*.

Reparameterised model (§3.1): ``Y = U W_V^T U^T`` (decoder, logits ``Y^T f``) and
``Z = U W_Q W_K^T U^T / sqrt(d)`` (attention logits; row = query). In the long-sequence limit
(Lemma 2) class ``n`` sees the attention ``c_n = softmax(ln P[n] + z_{psi(n)})`` on the
contextual tokens and ``f_n = c_n / ||c_n||``.

Contents
--------
SequenceClasses          the data model (probabilities, query/label ids, distinct/common masks,
                         sampling)
syn_small, single_common data sets: the authors' Syn-Small generator (M = 34 incl. query and next
                         ids) and K classes with D distinct tokens each plus one common token
attention_velocity       eq. 10 / 97 with the Theorem-1 coefficient beta = E', per unit
                         eta_Z gamma; also xi_n / gamma
shared_query_velocity,   the same for K classes sharing one query, on the contextual tokens only
integrate_shared_query   (cheap at any vocabulary size), and its solve_ivp integration with B_n
population_run           the batch-1 population (Y, Z) dynamics of Lemma 1 + Lemma 2
population_growth_run    the same, recording every class's xi_n and gamma at every step (B_n, gamma(t))
eq3_gradients            Lemma 1 (eq. 3) for one sequence: dJ/dY and dJ/dZ in closed form
decoder_run              Lemma 5's single-class decoder iteration (population_run with eta_Z = 0)
OneLayerTransformer      torch: embedding, softmax self-attention (separate W_Q, W_K, W_V), the
                         l2 normalisation of §1.2, decoder tied to the embedding, cross-entropy
train_transformer        SGD (two learning rates eta_Y, eta_Z, momentum) on sampled sequences
train_transformer_side_by_side  several (eta_Y, eta_Z) from one initialisation on the same batches, stacked
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

try:
    import torch
    from torch import nn
    from torch.optim.adam import adam as functional_adam        # torch's Adam and SGD without the Optimizer class
    from torch.optim.sgd import sgd as functional_sgd
except ImportError:  # pragma: no cover
    torch = nn = functional_adam = functional_sgd = None

__all__ = ["SequenceClasses", "syn_small", "syn_medium", "single_common", "attention_velocity", "shared_query_velocity",
           "integrate_shared_query", "population_run", "population_growth_run", "decoder_run",
           "OneLayerTransformer", "train_transformer", "train_transformer_side_by_side", "dt_entropy",
           "side_by_side_rates", "side_by_side_parameters", "side_by_side_stack", "side_by_side_mix",
           "side_by_side_step", "StackedSGD", "StackedAdam", "PlainSGD"]


@dataclass(frozen=True)
class SequenceClasses:
    """Sequence classes s_n = (P(l | n), psi(n), n) of §3.2.

    Attributes
    ----------
    P : ndarray (K, M)
        P(l | n): rows sum to 1, zero off the support (and on query / next-token ids).
    psi : ndarray (K,) of int
        Query token of each class (x_T = psi(n)).
    label : ndarray (K,) of int
        Next-token id of each class (x_{T+1}), in [M].
    """

    P: np.ndarray
    psi: np.ndarray
    label: np.ndarray

    def __post_init__(self):
        P = np.asarray(self.P, dtype=np.float64)
        if P.ndim != 2:
            raise ValueError(f"P: expected a (K, M) array, got shape {P.shape}")
        if np.any(P < 0) or not np.allclose(P.sum(1), 1.0, atol=1e-12):
            raise ValueError("P: rows must be probability vectors")
        K, M = P.shape
        for name in ("psi", "label"):
            v = np.asarray(getattr(self, name))
            if v.shape != (K,) or np.any(v < 0) or np.any(v >= M):
                raise ValueError(f"{name}: expected K = {K} token ids in [0, {M}), got {v!r}")
        if np.any(P[:, np.asarray(self.label)] > 0) or np.any(P[:, np.asarray(self.psi)] > 0):
            raise ValueError("P: query and next-token ids must not be contextual tokens")
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "psi", np.asarray(self.psi, dtype=int))
        object.__setattr__(self, "label", np.asarray(self.label, dtype=int))

    @property
    def K(self) -> int:
        return self.P.shape[0]

    @property
    def M(self) -> int:
        return self.P.shape[1]

    @property
    def omega(self) -> np.ndarray:
        """|Omega(l)|: number of classes whose support contains token l (M,)."""
        return (self.P > 0).sum(0)

    @property
    def distinct(self) -> np.ndarray:
        """(K, M) mask: l in G_DT(n)."""
        return (self.P > 0) & (self.omega == 1)[None, :]

    @property
    def common(self) -> np.ndarray:
        """(K, M) mask: l in supp(n) and l in G_CT."""
        return (self.P > 0) & (self.omega > 1)[None, :]

    def attention(self, Z: np.ndarray) -> np.ndarray:
        """Long-sequence attention c_n = softmax(ln P[n] + Z[psi(n)]) (Lemma 2), (K, M)."""
        logits = np.where(self.P > 0, Z[self.psi], -np.inf)
        logits = logits - logits.max(1, keepdims=True)
        c = self.P * np.exp(np.where(self.P > 0, logits, 0.0))
        return c / c.sum(1, keepdims=True)

    def sample(self, batch: int, T: int, generator=None):
        """Sample ``batch`` sequences (torch): classes uniform, ``T - 1`` i.i.d. contextual tokens.

        Returns (context (B, T-1) long, query (B,) long, label (B,) long, cls (B,) long).
        """
        if T < 2:
            raise ValueError(f"T: need T >= 2 (at least one contextual token), got {T}")
        P = torch.as_tensor(self.P)
        cls = torch.randint(self.K, (batch,), generator=generator)
        context = torch.multinomial(P[cls], T - 1, replacement=True, generator=generator)
        return context, torch.as_tensor(self.psi)[cls], torch.as_tensor(self.label)[cls], cls


def syn_small(num_common: int = 10, num_distinct: int = 10, separate_queries: bool = True) -> SequenceClasses:
    """Syn-Small (§8; the authors' generator): K = 2, common tokens 0..num_common-1 with weight 1,
    num_distinct distinct tokens per class with weights linspace(0.1, 1, num_distinct); query ids
    follow the contextual ids, then the next-token ids (M = 34 for the defaults). The two-class case of
    :func:`syn_medium`: two queries of one class each, or one query shared by both."""
    if separate_queries:
        return syn_medium(2, 1, num_common=num_common, num_unique=num_distinct)
    return syn_medium(1, 2, num_common=num_common, num_unique=num_distinct)


def syn_medium(num_last: int, num_next_per_last: int = 2, num_common: int = 10,
               num_unique: int = 10) -> SequenceClasses:
    """The Syn-Medium data set of one Fig. 6 panel (``num_last`` queries, ``num_next_per_last`` classes each);
    num_last = 1 is Syn-Small with one shared query (M = 33)."""
    for name, value, low in (("num_last", num_last, 1), ("num_next_per_last", num_next_per_last, 1),
                             ("num_unique", num_unique, 1), ("num_common", num_common, 0)):
        if value < low:
            raise ValueError(f"{name}: must be >= {low}, got {value}")
    K = num_last * num_next_per_last
    n_ctx = num_common + K * num_unique
    M = n_ctx + num_last + K
    P = np.zeros((K, M))
    for n in range(K):
        P[n, :num_common] = 1.0
        lo = num_common + n * num_unique
        P[n, lo:lo + num_unique] = np.linspace(0.1, 1.0, num_unique)
    P /= P.sum(1, keepdims=True)
    psi = n_ctx + np.arange(K) // num_next_per_last
    label = n_ctx + num_last + np.arange(K)
    return SequenceClasses(P, psi, label)


def single_common(K: int, D: int, distinct_weights=None, common_weight: float = 1.0,
                  shared_query: bool = True, vocabulary: int | None = None) -> SequenceClasses:
    """K classes, each with D distinct tokens and one common token (id 0) shared by all:
    the setting of Theorem 2(b) / Theorem 4. Distinct weights default to linspace(1, 2, D)
    (the same pattern in every class, Corollary 2's symmetric case); ids: common 0, distinct
    1..K D, queries, then next tokens."""
    w = np.linspace(1.0, 2.0, D) if distinct_weights is None else np.asarray(distinct_weights, float)
    if w.shape != (D,):
        raise ValueError(f"distinct_weights: expected {D} weights, got shape {w.shape}")
    n_ctx = 1 + K * D
    n_q = 1 if shared_query else K
    M = n_ctx + n_q + K
    if vocabulary is not None:
        if vocabulary < M:
            raise ValueError(f"vocabulary: need at least {M} tokens for K = {K}, D = {D}, got {vocabulary}")
        M = vocabulary
    P = np.zeros((K, M))
    P[:, 0] = common_weight
    for n in range(K):
        P[n, 1 + n * D:1 + (n + 1) * D] = w
    P /= P.sum(1, keepdims=True)
    psi = n_ctx + (np.zeros(K, dtype=int) if shared_query else np.arange(K))
    return SequenceClasses(P, psi, n_ctx + n_q + np.arange(K))


# -- the attention ODE (eq. 10 with the Theorem-1 gradient) -----------------------------------
def attention_velocity(classes: SequenceClasses, Z: np.ndarray, scale: float = 1.0):
    """dZ/dt / (eta_Z gamma) and xi_n / gamma for the logits ``Z`` (M, M) (eq. 10).

    f_n = c_n/||c_n||, E = F^T F - I, beta = E' = I - (I + E)^{-1} (Theorem 1, eq. 88 to first
    order), and row psi(n) of Z moves by ``scale * f_n * sum_{n' != n} beta_nn' ((f_n^T f_n') f_n -
    f_n')`` (eq. 10 / 97); ``scale = 1`` sums the classes literally, ``1/K`` averages them (expected
    batch-1 SGD). Returns (dZ (M, M), xi (K,)).
    """
    c = classes.attention(Z)
    f = c / np.linalg.norm(c, axis=1, keepdims=True)
    O = f @ f.T
    beta = np.eye(classes.K) - np.linalg.inv(O)
    np.fill_diagonal(beta, 0.0)
    xi = (beta * O).sum(1)
    v = f * (xi[:, None] * f - beta @ f)
    dZ = np.zeros_like(Z)
    np.add.at(dZ, classes.psi, scale * v)
    return dZ, xi


def shared_query_velocity(P: np.ndarray, z: np.ndarray, scale: float = 1.0):
    """Eq. 10 for K classes sharing one query, on the contextual tokens: ``P`` (K, L) = P(l | n) over the
    L contextual tokens, ``z`` (L,) the query's logits on them. Returns (dz/(eta_Z gamma) (L,), xi_n/gamma
    (K,), f (K, L)); ``scale`` as in :func:`attention_velocity` (1/K: expected batch-1 SGD)."""
    c = P * np.exp(z - z.max())
    f = c / np.linalg.norm(c, axis=1, keepdims=True)
    O = f @ f.T
    beta = np.eye(len(P)) - np.linalg.inv(O)
    np.fill_diagonal(beta, 0.0)
    xi = (beta * O).sum(1)
    return scale * (f * (xi[:, None] * f - beta @ f)).sum(0), xi, f


def integrate_shared_query(P: np.ndarray, M: int, eta_Y: float, eta_Z: float, ts, scale: float,
                           rtol: float = 1e-11, atol: float = 1e-13):
    """Integrate eq. 10 (:func:`shared_query_velocity`) with the registered gamma(t) (vocabulary ``M``,
    K = len(P) classes) and dB_n/dt = eta_Z gamma xi_n, in u = ln(1 + t) (DOP853), from z = 0, B = 0.

    Returns (z (n_t, L), B (n_t, K)) at the times ``ts`` (ascending, ts[0] >= 0)."""
    import theory
    from scipy.integrate import solve_ivp

    K, L = P.shape
    gamma = theory.get("scan_snap.speed.gamma")
    # M, K, eta_Y validated once; each rhs call then runs the record's evaluator on t >= 0 (the value of the
    # registry call, without its validation: 40 us of the solver's few thousand calls)
    values, dims = gamma.validate({"t": 0.0, "M": M, "K": K, "eta_Y": eta_Y}, "numpy")

    def rhs(u, y):
        t = np.expm1(u)
        dz, xi, _ = shared_query_velocity(P, y[:L], scale)
        values["t"] = t
        g = float(np.asarray(gamma.evaluate("numpy", values, dims), dtype=np.float64))
        return np.concatenate([dz, xi]) * (eta_Z * g * (1 + t))

    us = np.log1p(np.asarray(ts, dtype=float))
    sol = solve_ivp(rhs, (0.0, us[-1]), np.zeros(L + K), t_eval=us, method="DOP853", rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"solve_ivp: {sol.message}")
    return sol.y[:L].T, sol.y[L:].T


# -- the population (Y, Z) dynamics (Lemma 1) ------------------------------------------------------
def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def population_run(classes: SequenceClasses, eta_Y: float, eta_Z: float, steps: int, *,
                   order=None, rng=None, record_every: int = 1):
    """Batch-1 population dynamics of Lemma 1 in the long-sequence limit (Lemma 2).

    Per step a class n (``order[s]``, else uniform from ``rng``, else round-robin): c = attention
    of n, f = c/||c||, alpha = softmax(Y^T f), g = Y (e_label - alpha); then
    ``Y += eta_Y f (e_label - alpha)^T`` and ``Z[psi(n)] += eta_Z (c/||c||) * (g - f (f^T g))``
    (eq. 4 with the old Y). Y(0) = Z(0) = 0.

    Returns a dict: ``Y``, ``Z`` (final), ``steps`` (recorded step counts), ``Zs`` (recorded Z
    rows of the queries, (R, n_queries, M)), ``dz`` (per-step logit increments of the updated
    class on its support, (steps, M), zero off the support) and ``cls`` (class per step).
    """
    K, M = classes.K, classes.M
    if order is None:
        order = rng.integers(K, size=steps) if rng is not None else np.arange(steps) % K
    order = np.asarray(order, dtype=int)
    Y = np.zeros((M, M))
    Z = np.zeros((M, M))
    queries = np.unique(classes.psi)
    rec_steps, rec_Z = [0], [Z[queries].copy()]
    dz = np.zeros((steps, M))
    for s in range(steps):
        n = order[s]
        m = classes.psi[n]
        c = _class_attention(classes, Z, n)
        cn = np.linalg.norm(c)
        f = c / cn
        alpha = _softmax(Y.T @ f)
        err = -alpha
        err[classes.label[n]] += 1.0
        g = Y @ err
        Y += eta_Y * np.outer(f, err)
        step = eta_Z * f * (g - f * (f @ g))
        Z[m] += step
        dz[s] = step
        if (s + 1) % record_every == 0:
            rec_steps.append(s + 1)
            rec_Z.append(Z[queries].copy())
    return {"Y": Y, "Z": Z, "steps": np.array(rec_steps), "Zs": np.array(rec_Z), "dz": dz, "cls": order,
            "queries": queries}


def population_growth_run(classes: SequenceClasses, eta_Y: float, eta_Z: float, order, tokens=None,
                          steps: int | None = None, modified: bool = False):
    """:func:`population_run` (batch-1, class ``order[s]`` at step s, Y(0) = Z(0) = 0) recording, at every
    step and for every class n (sampled or not), the Theorem-1 quantities of the current state:
    g_n = Y (e_n - alpha_n) with alpha_n = softmax(Y^T f_n), gamma_n = g_nl/f_nl and
    xi_n = g_nl/f_nl - f_n^T g_n at the distinct token l = ``tokens[n]`` (default: the most probable
    distinct token of class n). If g = gamma (iota f_n - sum beta_nn' f_n') (eq. 9) with iota = 1, these
    are Theorem 1's gamma and xi_n, and a step of class n moves the logit of a distinct token l by
    eta_Z f_nl^2 xi_n (eq. 98) exactly.

    Returns a dict: ``z`` (steps + 1, M): the logit row of the query of class 0 after each step;
    ``xi``, ``gamma`` (steps, K): values before each step; ``f2`` (steps + 1, K): f_nl^2 at ``tokens``;
    ``tokens``; ``cls``: the order; ``Y``, ``Z``: the final matrices.

    ``order=None`` (with ``steps``): the expected update of a uniformly sampled class at every step, i.e. each
    class's batch-1 update weighted 1/K (what a large batch averages to; no sampling noise).

    ``modified=True``: the decoder follows the modified gradient of eq. 26, dY = eta_Y (f_n - F E' e_n)(e_n -
    alpha_n)^T with E' = I - (F^T F)^{-1} of the current attention (the dynamics Lemma 3 and Theorem 5 solve, from
    which Theorem 1's beta = E' comes); the attention keeps eq. 4. Needs the classes to share one query.
    """
    K, M = classes.K, classes.M
    if order is None:
        if steps is None:
            raise ValueError("steps: needed when order is None (the expected update)")
    else:
        order = np.asarray(order, dtype=int)
        steps = len(order)
    if tokens is None:
        tokens = np.array([np.flatnonzero(classes.distinct[n])[np.argmax(np.where(classes.distinct[n],
                                                                                  classes.P[n], -1)
                                                                         [classes.distinct[n]])]
                           for n in range(K)])
    tokens = np.asarray(tokens, dtype=int)
    support = classes.P > 0
    logP = np.where(support, np.log(np.where(support, classes.P, 1.0)), -np.inf)
    Y = np.zeros((M, M))
    Z = np.zeros((M, M))
    E = np.zeros((M, K))
    E[classes.label, np.arange(K)] = 1.0
    m0 = classes.psi[0]
    zs, xis, gams, f2s = [Z[m0].copy()], np.zeros((steps, K)), np.zeros((steps, K)), []
    rows = np.arange(K)

    def attention():
        a = logP + Z[classes.psi]
        a = a - a.max(1, keepdims=True)
        c = np.exp(a)
        return c / np.linalg.norm(c, axis=1, keepdims=True)  # f (K, M), zero off the support

    f = attention()
    f2s.append(f[rows, tokens] ** 2)
    for s in range(steps):
        logits = Y.T @ f.T                                   # (M, K): alpha_n = softmax of column n
        logits -= logits.max(0, keepdims=True)
        al = np.exp(logits)
        al /= al.sum(0, keepdims=True)
        err = E - al                                         # e_n - alpha_n, columns
        G = Y @ err                                          # g_n, columns
        ftok = f[rows, tokens]
        gam = G[tokens, rows] / ftok
        gams[s] = gam
        xis[s] = gam - np.einsum("km,mk->k", f, G)
        if modified:
            Ep = np.eye(K) - np.linalg.inv(f @ f.T)             # E' = I - (I + E)^{-1}, F^T F = I + E
            fdir = f - Ep.T @ f                                  # row n: f_n - F E' e_n
        else:
            fdir = f
        if order is None:
            Y += (eta_Y / K) * (fdir.T @ err.T)
            dz = (eta_Z / K) * f * (G.T - f * np.einsum("km,mk->k", f, G)[:, None])
            np.add.at(Z, classes.psi, dz)
        else:
            n = order[s]
            fn, gn = f[n], G[:, n]
            Y += eta_Y * np.outer(fdir[n], err[:, n])
            Z[classes.psi[n]] += eta_Z * fn * (gn - fn * (fn @ gn))
        f = attention()
        zs.append(Z[m0].copy())
        f2s.append(f[rows, tokens] ** 2)
    return {"z": np.array(zs), "xi": xis, "gamma": gams, "f2": np.array(f2s), "tokens": tokens, "cls": order,
            "Y": Y, "Z": Z}


def _class_attention(classes, Z, n):
    P = classes.P[n]
    sup = P > 0
    logit = Z[classes.psi[n]]
    mx = logit[sup].max()
    c = np.where(sup, P * np.exp(np.where(sup, logit - mx, 0.0)), 0.0)
    return c / c.sum()


def eq3_gradients(Y: np.ndarray, Z: np.ndarray, context, query: int, label: int, *, projector: bool = True):
    """Lemma 1 (eq. 3) for one sequence: the gradients (dJ/dY, dJ/dZ) of J = x_{T+1}^T Y^T LN(X^T b_T) - log 1^T
    exp(Y^T LN(X^T b_T)) (eq. 15), b_T = softmax over the contextual tokens of z_{m, x_t} (m = ``query``).

    dJ/dY = LN(X^T b)(e_label - alpha)^T and dJ/dZ = x_T (e_label - alpha)^T Y^T P^perp_{X^T b} X^T diag(b) X /
    ||X^T b||, written row-wise as eq. 4: only row m is nonzero, z_m' = X^T diag(b) X P^perp Y (e_label - alpha)
    / ||X^T b||. ``projector=False`` drops P^perp (a wrong form, for negative controls).
    """
    M = Y.shape[0]
    x = np.asarray(context, dtype=int)
    X = np.zeros((x.size, M))
    X[np.arange(x.size), x] = 1.0
    a = Z[query, x]
    b = np.exp(a - a.max())
    b /= b.sum()
    v = X.T @ b
    nv = np.linalg.norm(v)
    ln = v / nv
    alpha = _softmax(Y.T @ ln)
    err = -alpha
    err[label] += 1.0
    dY = np.outer(ln, err)
    g = Y @ err
    Pg = g - ln * (ln @ g) if projector else g
    dZ = np.zeros_like(Z)
    dZ[query] = (X.T @ np.diag(b) @ X) @ Pg / nv
    return dY, dZ


def decoder_run(M: int, eta_Y: float, steps: int, f: np.ndarray, label: int = 0):
    """Lemma 5: Y(0) = 0, fixed unit attention f (Z fixed), next token ``label`` every step:
    ``Y += eta_Y f (e_label - alpha)^T`` with alpha = softmax(Y^T f).

    Returns (w (steps + 1, M): the rows w_n(s) = Y(s)^T f, alpha (steps, M): alpha_n(s) used at
    step s = 1..steps).
    """
    f = np.asarray(f, dtype=np.float64)
    Y = np.zeros((f.size, M))
    ws, alphas = [np.zeros(M)], []
    for _ in range(steps):
        alpha = _softmax(Y.T @ f)
        err = -alpha
        err[label] += 1.0
        Y += eta_Y * np.outer(f, err)
        ws.append(Y.T @ f)
        alphas.append(alpha)
    return np.array(ws), np.array(alphas)


def dt_entropy(c: np.ndarray, classes: SequenceClasses) -> np.ndarray:
    """Entropy of c_n restricted to G_DT(n) and renormalised, per class (K,) (the Fig. 4/6 statistic)."""
    mask = classes.distinct
    q = np.where(mask, c, 0.0)
    q = q / q.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(mask & (q > 0), q * np.log(q), 0.0).sum(1)


# -- torch: the 1-layer transformer --------------------------------------------------------------


def side_by_side_rates(rates, steps: int, batches) -> list[tuple[float, float]]:
    """The ``(eta_Y, eta_Z)`` pairs of a side-by-side training as floats, after checking that there is at
    least one and that ``batches`` holds one pre-drawn batch per step."""
    rates = [(float(eY), float(eZ)) for eY, eZ in rates]
    if not rates:
        raise ValueError("rates: expected at least one (eta_Y, eta_Z) pair")
    if batches is None or len(batches) != steps:
        raise ValueError(f"batches: expected {steps} pre-drawn batches, got "
                         f"{None if batches is None else len(batches)}")
    return rates


def side_by_side_parameters(start: dict, optimizer, **options):
    """Runs trained side by side with torch's optimiser: ``start`` maps a parameter's name to ``(its
    initial value, the learning rate of each run)``; each run gets its own copy of every parameter (a leaf)
    in a parameter group of its learning rate, so one ``optimizer`` (e.g. ``torch.optim.Adam``, ``**options``)
    makes every run's own update. Returns ``({name: [leaf per run]}, optimizer)``; a step stacks the leaves
    (:func:`side_by_side_stack`), so the runs' summed losses give each leaf its own gradient.

    ``torch.optim.SGD`` (``momentum`` and ``dampening`` its only options) is replaced by :class:`StackedSGD`,
    ``torch.optim.Adam`` (``betas`` and ``eps`` its only options) by :class:`StackedAdam`: one leaf per name
    with the runs stacked on a leading axis (``{name: (R, ...) leaf}``), and the optimiser's arithmetic run by
    run on its slices (the same numbers without torch's per-group machinery, the stacking and its backward
    pass)."""
    stacked = {torch.optim.SGD: (StackedSGD, {"momentum", "dampening"}),
               torch.optim.Adam: (StackedAdam, {"betas", "eps"})}.get(optimizer)
    if stacked is not None and set(options) <= stacked[1]:
        runs = {k: value.detach().clone().unsqueeze(0).repeat(len(lrs), *[1] * value.ndim).requires_grad_(True)
                for k, (value, lrs) in start.items()}
        return runs, stacked[0](runs, {k: lrs for k, (_, lrs) in start.items()}, **options)
    runs = {k: [value.clone().requires_grad_(True) for _ in lrs] for k, (value, lrs) in start.items()}
    groups = [{"params": [p], "lr": lr} for k, (_, lrs) in start.items() for p, lr in zip(runs[k], lrs)]
    return runs, optimizer(groups, **options)


def side_by_side_stack(runs: dict) -> dict:
    """The parameters of :func:`side_by_side_parameters` stacked over the runs: ``{name: (R, ...) tensor}``."""
    return {k: v if isinstance(v, torch.Tensor) else torch.stack(v) for k, v in runs.items()}


class StackedSGD:
    """``torch.optim.SGD`` (no weight decay, no Nesterov) on parameters stacked over runs, a learning rate per
    run: ``params`` maps a name to an (R, ...) leaf, ``lrs`` to its R learning rates. Each step repeats
    torch's single-tensor update: the momentum buffer is the gradient at the first step, then ``buf =
    momentum buf + (1 - dampening) grad``; the run's slice ``p[r] += -lr_r buf[r]`` (``add_`` with
    ``alpha = -lr_r``, torch's own call, so the numbers are those of one SGD per run)."""

    def __init__(self, params: dict, lrs: dict, momentum: float = 0.0, dampening: float = 0.0):
        self.params, self.momentum, self.dampening = params, float(momentum), float(dampening)
        self.lrs = {k: [float(lr) for lr in lrs[k]] for k in params}
        for k, p in params.items():
            if len(self.lrs[k]) != p.shape[0]:
                raise ValueError(f"lrs: expected {p.shape[0]} learning rates for {k}, got {len(self.lrs[k])}")
        self.buffers: dict = {}

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params.values():
            p.grad = None

    def step(self):
        with torch.no_grad():
            for k, p in self.params.items():
                grad = p.grad
                if self.momentum != 0:
                    buf = self.buffers.get(k)
                    if buf is None:
                        buf = self.buffers[k] = grad.detach().clone()
                    else:
                        buf.mul_(self.momentum).add_(grad, alpha=1 - self.dampening)
                    grad = buf
                for r, lr in enumerate(self.lrs[k]):
                    p[r].add_(grad[r], alpha=-lr)


class PlainSGD:
    """torch's functional SGD (``torch.optim.sgd.sgd``, ``foreach=False``: what ``torch.optim.SGD`` runs on
    the CPU; no weight decay, no Nesterov) on a list of parameters with one learning rate: torch's own
    arithmetic (the momentum buffer is the gradient at the first step, then ``buf = momentum buf +
    (1 - dampening) grad``; ``p += -lr buf``), without the Optimizer's per-step bookkeeping (whose first
    use in a process also imports ``torch._dynamo``, about a CPU-second). This class only holds the state
    (the momentum buffers, the learning rate); parameters without a gradient are skipped, as torch does."""

    def __init__(self, params, lr: float, momentum: float = 0.0, dampening: float = 0.0):
        self.params, self.lr = list(params), float(lr)
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.buffers: list = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None

    def step(self):
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        buffers = [self.buffers[i] for i in live]
        with torch.no_grad():
            functional_sgd([self.params[i] for i in live], [self.params[i].grad for i in live], buffers,
                           foreach=False, weight_decay=0.0, momentum=self.momentum, lr=self.lr,
                           dampening=self.dampening, nesterov=False, maximize=False)
        if self.momentum != 0:
            for i, buf in zip(live, buffers):          # torch's sgd creates the buffers at the first step
                self.buffers[i] = buf


class StackedAdam(StackedSGD):
    """torch's functional Adam (``torch.optim.adam.adam``, ``foreach=False``: what ``torch.optim.Adam`` runs
    on the CPU; no weight decay, no amsgrad) on parameters stacked over runs, a learning rate per run:
    ``params`` maps a name to an (R, ...) leaf, ``lrs`` to its R learning rates. Each step is one call of
    torch's own arithmetic per learning rate, on the slices of the runs that have it (each slice with its
    own moments and its own step count, a float tensor as torch's), without the Optimizer's per-step
    bookkeeping: the numbers of one Adam per run, to the bit. This class only holds the state."""

    def __init__(self, params: dict, lrs: dict, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lrs)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.exp_avg = {k: torch.zeros_like(p.detach()) for k, p in params.items()}
        self.exp_avg_sq = {k: torch.zeros_like(p.detach()) for k, p in params.items()}
        self.state_steps = {k: [torch.tensor(0.0, dtype=torch.float32) for _ in self.lrs[k]] for k in params}
        self.groups: dict = {}                      # learning rate -> the (name, run) slices that have it
        for k in params:
            for r, lr in enumerate(self.lrs[k]):
                self.groups.setdefault(lr, []).append((k, r))

    def step(self):
        with torch.no_grad():
            for lr, slices in self.groups.items():
                functional_adam(
                    [self.params[k][r] for k, r in slices], [self.params[k].grad[r] for k, r in slices],
                    [self.exp_avg[k][r] for k, r in slices], [self.exp_avg_sq[k][r] for k, r in slices], [],
                    [self.state_steps[k][r] for k, r in slices], foreach=False, amsgrad=False,
                    beta1=self.beta1, beta2=self.beta2, lr=lr, weight_decay=0.0, eps=self.eps, maximize=False)


def side_by_side_mix(scores, context, M: int):
    """``X^T b`` per run: the softmax over a batch's contextual tokens of ``scores`` (R, B, M: each run's
    attention logit of every vocabulary token for each sequence's query), scattered back onto the
    vocabulary (R, B, M); ``context`` holds the tokens (B, T-1)."""
    R, B = scores.shape[:2]
    idx = context.expand(R, *context.shape)
    b = torch.softmax(torch.gather(scores, 2, idx), dim=-1)                        # (R, B, T-1)
    return torch.zeros(R, B, M, dtype=b.dtype).scatter_add(2, idx, b)


def side_by_side_step(opt, logits, label) -> np.ndarray:
    """One optimiser step of runs trained side by side: each run's mean cross-entropy of ``logits``
    (R, B, M) against ``label`` (B,), their sum back-propagated (each run's gradient is its own), then
    ``opt.step()`` (``opt`` one optimiser, or a list of them, each stepped). Returns the runs' losses (R,)."""
    R, B, M = logits.shape
    opts = opt if isinstance(opt, (list, tuple)) else [opt]
    per = nn.functional.cross_entropy(logits.reshape(R * B, M), label.repeat(R), reduction="none").view(R, B).mean(1)
    for o in opts:
        o.zero_grad(set_to_none=True)
    per.sum().backward()
    for o in opts:
        o.step()
    return per.detach().numpy()


if nn is not None:

    class OneLayerTransformer(nn.Module):
        """1-layer transformer of §1.2: embedding U (M x d), softmax self-attention of the query on
        the contextual tokens with separate W_Q, W_K (d x d), the l2-normalised attention output
        ``u~ = U^T LN(X^T b)``, value/decoder ``logits_k = u_k^T W_V u~`` (decoder tied to U), no
        residual, no positional encoding.

        Parameters
        ----------
        M, d : int
            Vocabulary size and embedding dimension (d >= M gives orthonormal embeddings, for
            which Y = U W_V^T U^T and Z = U W_Q W_K^T U^T / sqrt(d) are free matrices).
        init : {"zero", "random"}
            ``zero``: W_V = 0 and W_K = 0 (so Y(0) = Z(0) = 0) with W_Q = sqrt(d) I (so that
            Z = U W_K^T U^T moves at first order; W_Q = W_K = 0 would be a saddle); ``random``:
            the ``nn.Linear`` default (uniform +-1/sqrt(d)) for W_Q, W_K, W_V.
        train_embedding : bool
            Whether U is trained (with the decoder's learning rate); default False (the paper's
            analysis holds U fixed).
        generator : torch.Generator
        """

        def __init__(self, M: int, d: int | None = None, init: str = "zero", train_embedding: bool = False,
                     generator=None):
            super().__init__()
            d = M if d is None else d
            if d < 1 or M < 2:
                raise ValueError(f"M: need M >= 2 and d >= 1, got M = {M}, d = {d}")
            if init not in ("zero", "random"):
                raise ValueError(f"init: expected 'zero' or 'random', got {init!r}")
            self.M, self.d = M, d
            A = torch.randn(max(M, d), max(M, d), generator=generator, dtype=torch.float64)
            Q, _ = torch.linalg.qr(A)
            U = Q[:M, :d].contiguous()
            if d < M:
                U = U / U.norm(dim=1, keepdim=True)
            self.U = nn.Parameter(U, requires_grad=train_embedding)
            if init == "zero":
                self.W_Q = nn.Parameter(math.sqrt(d) * torch.eye(d, dtype=torch.float64))
                self.W_K = nn.Parameter(torch.zeros(d, d, dtype=torch.float64))
                self.W_V = nn.Parameter(torch.zeros(d, d, dtype=torch.float64))
            else:
                b = 1.0 / math.sqrt(d)
                self.W_Q, self.W_K, self.W_V = (
                    nn.Parameter((2 * torch.rand(d, d, generator=generator, dtype=torch.float64) - 1) * b)
                    for _ in range(3))

        def attention(self, context, query):
            """b (B, T-1): softmax_t(u_q^T W_Q W_K^T u_t / sqrt d) over the contextual tokens."""
            # the score of every vocabulary token, then the context's: (B, M) then a gather, instead of
            # embedding all B (T-1) context tokens through W_K (the same numbers, M / (T-1) of the work)
            uq = self.U[query] @ self.W_Q  # (B, d)
            per_token = uq @ (self.U @ self.W_K).T / math.sqrt(self.d)  # (B, M)
            scores = torch.gather(per_token, 1, context)  # (B, T-1)
            return torch.softmax(scores, dim=-1)

        def forward(self, context, query):
            """Decoder logits (B, M) and the attention b (B, T-1)."""
            b = self.attention(context, query)
            xb = torch.zeros(context.shape[0], self.M, dtype=b.dtype).scatter_add(1, context, b)  # X^T b
            ln = xb / xb.norm(dim=1, keepdim=True)
            u = ln @ self.U  # U^T LN(X^T b)
            logits = (u @ self.W_V.T) @ self.U.T  # u_k^T W_V u~
            return logits, b

        def logit_matrices(self):
            """(Y, Z) = (U W_V^T U^T, U W_Q W_K^T U^T / sqrt d) as numpy arrays."""
            with torch.no_grad():
                Y = self.U @ self.W_V.T @ self.U.T
                Z = self.U @ self.W_Q @ self.W_K.T @ self.U.T / math.sqrt(self.d)
            return Y.numpy().copy(), Z.numpy().copy()

        def decoder_parameters(self):
            return [self.W_V] + ([self.U] if self.U.requires_grad else [])

        def attention_parameters(self):
            return [self.W_Q, self.W_K]

    def train_transformer(model, classes: SequenceClasses, *, eta_Y: float, eta_Z: float, steps: int,
                          batch: int = 128, T: int = 128, momentum: float = 0.9, generator=None,
                          record_every: int = 1, batches=None):
        """SGD on the batch-mean cross-entropy with two optimisers (decoder eta_Y, attention eta_Z),
        the authors' synthetic protocol (batch 128, T = 128, momentum 0.9). Fresh sequences each step.

        ``batches``: ``steps`` pre-drawn ``classes.sample`` batches to train on instead of drawing them
        from ``generator`` (runs that share a seed draw the same sequences: draw them once).

        Returns a dict with ``steps`` (recorded), ``loss`` (per step), ``c`` (recorded long-sequence
        attention c_n from the current Z, (R, K, M)).
        """
        if batches is not None and len(batches) != steps:
            raise ValueError(f"batches: expected {steps} batches (one per step), got {len(batches)}")
        opt_y = PlainSGD(model.decoder_parameters(), lr=eta_Y, momentum=momentum)   # torch's functional SGD
        opt_z = PlainSGD(model.attention_parameters(), lr=eta_Z, momentum=momentum)
        losses, rec_steps, cs = [], [0], [classes.attention(model.logit_matrices()[1])]
        for s in range(steps):
            context, query, label, _ = classes.sample(batch, T, generator) if batches is None else batches[s]
            logits, _ = model(context, query)
            loss = nn.functional.cross_entropy(logits, label)
            opt_y.zero_grad()
            opt_z.zero_grad()
            loss.backward()
            opt_y.step()
            opt_z.step()
            losses.append(loss.item())
            if (s + 1) % record_every == 0:
                rec_steps.append(s + 1)
                cs.append(classes.attention(model.logit_matrices()[1]))
        return {"steps": np.array(rec_steps), "loss": np.array(losses), "c": np.array(cs)}

    def train_transformer_side_by_side(classes: SequenceClasses, rates, *, steps: int, batches, momentum: float = 0.9,
                                       init: str = "zero", generator=None) -> list[dict]:
        """:func:`train_transformer` for several learning-rate pairs ``rates`` = [(eta_Y, eta_Z), ...] from one
        :class:`OneLayerTransformer` initialisation (``init``, drawn from ``generator``; d = M, U frozen) on the same
        pre-drawn ``batches`` (``steps`` of ``classes.sample``): W_Q, W_K, W_V stacked over the runs, one forward and
        backward pass per step (the runs' losses summed: each run's gradient is its own), torch's momentum-SGD
        update per run. Returns one dict per pair with ``steps`` ([0, steps]), ``loss`` (per step) and ``c`` (the
        long-sequence attention at the start and the end, (2, K, M))."""
        rates = side_by_side_rates(rates, steps, batches)
        model = OneLayerTransformer(classes.M, init=init, generator=generator)
        R, M, d = len(rates), classes.M, model.d
        U = model.U.detach()
        runs, opt = side_by_side_parameters(
            {k: (getattr(model, k).detach(), [eta[0 if k == "W_V" else 1] for eta in rates])
             for k in ("W_Q", "W_K", "W_V")}, torch.optim.SGD, momentum=momentum)
        c0 = classes.attention(model.logit_matrices()[1])
        losses = np.zeros((steps, R))
        scale = math.sqrt(d)
        for s in range(steps):
            context, query, label = batches[s][:3]
            W = side_by_side_stack(runs)                                                 # (R, d, d) each
            uq = U[query] @ W["W_Q"]                                                     # (R, B, d)
            xb = side_by_side_mix(uq @ (U @ W["W_K"]).transpose(1, 2) / scale, context, M)  # (R, B, M)
            u = (xb / xb.norm(dim=2, keepdim=True)) @ U
            losses[s] = side_by_side_step(opt, (u @ W["W_V"].transpose(1, 2)) @ U.T, label)
        out = []
        with torch.no_grad():
            for r in range(R):
                Z = (U @ runs["W_Q"][r] @ runs["W_K"][r].T @ U.T / scale).numpy().copy()
                out.append({"steps": np.array([0, steps]), "loss": losses[:, r].copy(),
                            "c": np.array([c0, classes.attention(Z)])})
        return out

else:  # without torch the names still import (so the checks register); using them says what is missing

    _NEEDS_TORCH = "needs torch: pip install 'attention-dynamics-theory[torch]'"

    class OneLayerTransformer:  # noqa: D101 (the torch class above documents it)
        def __init__(self, *args, **kwargs):
            raise ImportError(f"OneLayerTransformer {_NEEDS_TORCH}")

    def train_transformer(*args, **kwargs):  # noqa: D103
        raise ImportError(f"train_transformer {_NEEDS_TORCH}")

    def train_transformer_side_by_side(*args, **kwargs):  # noqa: D103
        raise ImportError(f"train_transformer_side_by_side {_NEEDS_TORCH}")
