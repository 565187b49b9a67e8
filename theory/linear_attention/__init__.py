"""Zhang, Singh, Latham, Saxe (ICML 2025), *Training Dynamics of In-Context Learning in
Linear Attention*.

Modules
-------
Every module here is imported by the registry on first use (see :mod:`theory.papers`).

:mod:`~theory.linear_attention.alignment`
    Alignment during a plateau of ATTN_S: the linearised flow of a head still near its start (Zhang,
    Singh, Latham, Saxe 2025, App. E.5.1, eqs. 64-66; App. E.6.1, eqs. 72-73).
:mod:`~theory.linear_attention.data`
    Moments of the in-context linear-regression task (Zhang, Singh, Latham, Saxe 2025).
:mod:`~theory.linear_attention.icl_iwl`
    In-context and in-weight learning with a fixed task vector (Zhang, Singh, Latham, Saxe 2025, App. G).
:mod:`~theory.linear_attention.merged`
    The merged key-query linear attention ATTN_M (Zhang, Singh, Latham, Saxe 2025, §3, App. D).
:mod:`~theory.linear_attention.ntp`
    Varying context length and the next-token loss (Zhang, Singh, Latham, Saxe 2025, App. A.1).
:mod:`~theory.linear_attention.separate`
    Separate key/query linear attention ATTN_S (Zhang, Singh, Latham, Saxe 2025, §4-5, App.
    E-F).
:mod:`~theory.linear_attention.zero_blocks`
    The blocks every reduced form sets to zero (Zhang, Singh, Latham, Saxe 2025, App. D.1, F.1).
"""

from ..papers import Paper
from ..symbols import Symbols

#: The paper of this topic (declared once; :data:`theory.papers.PAPERS` is built from it).
PAPER = Paper(authors=("Zhang", "Singh", "Latham", "Saxe"), year=2025,
              title="Training Dynamics of In-Context Learning in Linear Attention", venue="ICML 2025",
              arxiv="2501.16265", url="https://proceedings.mlr.press/v267/zhang25br.html",
              names=("Zhang, Yedi", "Singh, Aaditya K.", "Latham, Peter E.", "Saxe, Andrew M."),
              booktitle="Proceedings of the 42nd International Conference on Machine Learning (PMLR 267)")

#: The symbols of this paper: Lambda (the input covariance), M (the merged key-query matrix), U (one
#: head's key-query block) and the eigen-projectors are D x D matrices, mu (the task prior's mean) and
#: w_star (App. G's fixed task vector) D-vectors; N_max, n, R, s are counts, m and j counts that may be 0;
#: time t, the value weight v and the portion p of fixed tasks are nonnegative, one head's value v_i is real.
SYMBOLS = Symbols(matrices=("Lambda", "Lambda_q", "M", "A", "P", "P_prev", "E_m", "U"),
                  vectors=("mu", "k_vec", "w_star"),
                  integers=("N_max", "n", "R", "s"), naturals=("m", "j"),
                  nonnegative=("t", "v", "p"), reals=("v_i", "V", "k0", "q0", "own", "other"),
                  latex={"lam": r"\lambda", "trLambda": r"(\operatorname{tr} \Lambda)", "N_max": r"N_{\max}",
                         "w_init": r"w_{\mathrm{init}}"})
#: ``sym(name)``: the sympy object of a name in this topic (modules: ``from . import sym``).
sym = SYMBOLS
