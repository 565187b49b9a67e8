"""One input-output mode of a two-layer linear network (Saxe, McClelland, Ganguli 2014).

Model: ``y = W32 W21 x`` with whitened inputs (``Sigma11 = E[x x^T] = I``) and the
input-output correlation ``Sigma31 = E[y x^T] = U S V^T`` (singular values ``s_alpha``).
Gradient flow on ``1/2 E||y - W32 W21 x||^2`` with time constant ``tau``::

    tau dW21/dt = W32^T (Sigma31 - W32 W21),    tau dW32/dt = (Sigma31 - W32 W21) W21^T.

From a balanced initialisation aligned with the singular vectors (``W21 = R diag(sqrt(u0)) V^T``,
``W32 = U diag(sqrt(u0)) R^T``, R orthogonal) the modes stay decoupled and balanced, and the
strength ``u = u_alpha^T W32 W21 v_alpha`` of each obeys the logistic equation
``tau du/dt = 2 u (s - u)``.

What is derived here (not retyped):

* ``strength``: the logistic equation solved by ``dsolve`` from ``u(0) = u0``, and proved equal to
  the paper's printed sigmoid ``s e^{2st/tau} / (e^{2st/tau} - 1 + s/u0)``;
* ``learning_time``: ``strength(t) = u_f`` solved for t by ``solve`` (the real root), proved equal
  to the printed ``tau/(2s) ln(u_f (s - u0) / (u0 (s - u_f)))``.

Contains
--------
``saxe_linear.modes.strength``, ``saxe_linear.modes.learning_time``.
"""

from __future__ import annotations

from functools import cache

from theory import ClosedForm, Param, nonnegative, positive, register

from . import sym

# ``s`` is a positive real here (this topic's symbol table), although another paper's table makes
# it an integer: symbols are per topic
S = Param("s", "positive", "Singular value s_alpha of the input-output correlation Sigma31 (the mode's final "
          "strength).", example_value=2.0)
U0 = Param("u0", "positive", "Initial mode strength u(0) (small, balanced initialisation).", example_value=0.01)
U_F = Param("u_f", "positive", "Target strength, strictly between u0 and s.", example_value=1.0)
T = nonnegative("t", "Time.", sample=(0, 20))
TAU = positive("tau", "Time constant of the gradient flow (1 / learning rate).")


def _symbols():
    return sym("s"), sym("u0"), sym("t"), sym("tau")


@cache
def derive_strength():
    """Solve ``tau du/dt = 2 u (s - u)``, ``u(0) = u0`` with ``dsolve``; written without the
    complex logarithm dsolve's form carries for u0 < s."""
    import sympy as sp

    s, u0, t, tau = _symbols()
    u = sp.Function("u")
    sol = sp.dsolve(sp.Eq(tau * u(t).diff(t), 2 * u(t) * (s - u(t))), u(t), ics={u(0): u0})
    return sp.simplify(sp.expand_log(sp.powsimp(sp.expand(sol.rhs), combine="exp"), force=True))


def printed_strength():
    import sympy as sp

    s, u0, t, tau = _symbols()
    e = sp.exp(2 * s * t / tau)
    return s * e / (e - 1 + s / u0)


def stable_strength():
    """``s / (1 + (s/u0 - 1) e^{-2st/tau})``: finite for every t (no inf / inf at large t)."""
    import sympy as sp

    s, u0, t, tau = _symbols()
    return s / (1 + (s / u0 - 1) * sp.exp(-2 * s * t / tau))


@cache
def derive_learning_time():
    """The time at which ``strength`` reaches ``u_f``: ``solve`` for t, the root that is real
    (checked at a point with u0 < u_f < s)."""
    import sympy as sp

    s, u0, t, tau = _symbols()
    uf = sym("u_f")
    roots = sp.solve(sp.Eq(derive_strength(), uf), t)
    point = {s: 2, u0: sp.Rational(1, 100), uf: 1, tau: 1}
    real = [r for r in roots if sp.N(r.subs(point)).is_real]
    if len(real) != 1:
        raise ArithmeticError(f"expected one real root, got {roots}")
    return sp.simplify(real[0])


def printed_learning_time():
    import sympy as sp

    s, u0, _, tau = _symbols()
    uf = sym("u_f")
    return tau / (2 * s) * sp.log(uf * (s - u0) / (u0 * (s - uf)))


def _between(values, dims):
    import numpy as np

    s, u0, uf = (np.asarray(values[k], dtype=float) for k in ("s", "u0", "u_f"))
    if not np.all((uf - u0) * (s - uf) > 0):
        raise ValueError("u_f: the target strength must lie strictly between u0 and s "
                         "(the trajectory never reaches it otherwise)")


SOURCE = "exact solution for a three-layer (two weight layers) linear network"

register(ClosedForm(
    id="saxe_linear.modes.strength",
    title="Strength u(t) = u_alpha^T W32 W21 v_alpha of one mode under gradient flow from a small balanced start",
    source=SOURCE + " (the sigmoid u_f(t))",
    status="exact",
    params=(S, U0, T, TAU),
    derive=derive_strength,
    printed=printed_strength,
    stable=stable_strength,
    example={"s": 2.0, "u0": 0.01, "t": 1.0, "tau": 1.0},
    doc="Whitened inputs, balanced initialisation aligned with the singular vectors of Sigma31 "
        "(the modes then decouple exactly); u rises sigmoidally from u0 to s, with a plateau of "
        "length ~ tau/(2s) ln(s/u0): stronger modes are learned first.",
))

register(ClosedForm(
    id="saxe_linear.modes.learning_time",
    title="Time for one mode to grow from u0 to u_f under gradient flow",
    source=SOURCE + " (the learning time t)",
    status="exact",
    params=(S, U0, U_F, TAU),
    derive=derive_learning_time,
    printed=printed_learning_time,
    domain=_between,
    example={"s": 2.0, "u0": 0.01, "u_f": 1.0, "tau": 1.0},
    doc="At u_f = s/2 the half-rise time tau/(2s) ln((s - u0)/u0): inversely proportional to the "
        "singular value, logarithmic in the initial strength.",
))
