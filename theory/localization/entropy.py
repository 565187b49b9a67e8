"""The attention-entropy lower bound (Bao, Hataya, Karakida 2024, eq. 9; Zhai et al. 2023, Thm 3.1).

Derived here: ``entropy.zhai_bound`` (eq. 9), the large-T form of Zhai et al.'s Theorem 3.1,
obtained by replacing each T-dependent factor by its leading order (sympy limits); the printed
eq. 9 (exponent ``-nu/2`` in the numerator) exceeds ``ln T`` and is the erratum.
``entropy.zhai_theorem`` is the finite-T bound itself (the source of the large-T form). ``nu`` is
the product ``||X X^T||_2 ||W_QK||_2`` of eq. 9.

Contains
--------
``localization.entropy.zhai_theorem``, ``.zhai_bound``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention networks localize when QK-eigenspectrum
   concentrates", ICML 2024, eq. 9.
.. [2] S. Zhai et al., "Stabilizing transformer training by preventing attention entropy
   collapse", ICML 2023, Theorem 3.1.
"""

from __future__ import annotations

from ..params import index, positive
from ..registry import ClosedForm, register
from . import sym

T_LEN = index("T", "Sequence length (number of keys).", low=2)
NU = positive("nu", "||X X^T||_2 ||W_QK||_2, the spectral scale of the logits (eq. 9).")


def zhai_theorem():
    """Zhai et al. 2023, Thm 3.1: Ent >= log(1 + (T-1) beta) + nu sqrt(T(T-1)) beta / (1 + (T-1) beta),
    beta = exp(-nu sqrt(T/(T-1)))."""
    import sympy as sp

    T, nu = sym("T"), sym("nu")
    beta = sp.exp(-nu * sp.sqrt(T / (T - 1)))
    return sp.log(1 + (T - 1) * beta) + nu * sp.sqrt(T * (T - 1)) * beta / (1 + (T - 1) * beta)


def derive_zhai_bound():
    """Large-T form of Thm 3.1: every T-dependent factor replaced by its leading order."""
    import sympy as sp

    T, nu = sym("T"), sym("nu")
    lead = {}
    for factor, guess in ((T - 1, T), (sp.sqrt(T / (T - 1)), sp.Integer(1)), (sp.sqrt(T * (T - 1)), T)):
        if sp.limit(factor / guess, T, sp.oo) != 1:
            raise ArithmeticError(f"leading order of {factor} is not {guess}")
        lead[factor] = guess
    beta = sp.exp(-nu * lead[sp.sqrt(T / (T - 1))])
    a = lead[T - 1] * beta
    expr = sp.log(1 + a) + nu * lead[sp.sqrt(T * (T - 1))] * beta / (1 + a)
    return sp.log(1 + T * sp.exp(-nu)) + sp.simplify(expr - sp.log(1 + a))


def printed_zhai_bound():
    import sympy as sp

    T, nu = sym("T"), sym("nu")
    return sp.log(1 + T * sp.exp(-nu)) + nu * sp.exp(-nu / 2) / (1 / T + sp.exp(-nu))


register(ClosedForm(
    id="localization.entropy.zhai_theorem",
    title="Zhai et al.'s attention-entropy lower bound at finite T",
    source="eq. 9 (Zhai et al. 2023, Theorem 3.1)",
    status="exact",
    params=(T_LEN, NU),
    derive=zhai_theorem,
    doc="nu = ||W_QK||_2 ||X X^T||_2; a lower bound on the Shannon entropy of each softmax row. "
        "Typed from the cited theorem (the source of eq. 9), not derived here.",
))

register(ClosedForm(
    id="localization.entropy.zhai_bound",
    title="Large-T attention-entropy lower bound ln(1 + T e^-nu) + nu e^-nu / (1/T + e^-nu)",
    source="eq. 9",
    status="asymptotic",
    params=(T_LEN, NU),
    derive=derive_zhai_bound,
    printed=printed_zhai_bound,
    erratum="Eq. 9 prints exp(-nu/2) in the numerator of the second term; then the 'lower bound' "
            "exceeds the maximum entropy ln T (16.7 vs 4.16 at T = 64, nu = 4). Zhai et al.'s "
            "Thm 3.1 gives exp(-nu) at large T, and the bound is then monotonically decreasing "
            "in nu (d/dnu = -nu a/(1 + a)^2, a = T e^-nu), not unimodal as the paper says.",
    doc="Large-T form of localization.entropy.zhai_theorem (T - 1 -> T, sqrt(T/(T-1)) -> 1, "
        "sqrt(T(T-1)) -> T).",
))
