"""Symbolic and high-precision checks of every linear-attention closed form.

* ``linear_attention.symbolic_printed_forms``: the derived expression equals the paper's
  printed one for every record without an erratum; every erratum record's printed form
  differs symbolically *and* numerically (the negative controls).
* ``linear_attention.high_precision``: the emitted numpy function agrees with the emitted
  mpmath function at 50 digits at random parameter points (relative error near float64
  round-off); a perturbed parameter is rejected by the same tolerance.
* ``linear_attention.merged.large_context_limit``: M*(N) -> Lambda^{-1} (§3.4) with error
  ~ 1/N, the rate the derived form implies.
"""

from __future__ import annotations

from ...symbolic import register_topic_checks

symbolic_printed_forms, high_precision = register_topic_checks(
    "linear_attention", control_id="linear_attention.merged.global_min_loss", control_param="Lambda")
