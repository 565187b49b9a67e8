"""Symbolic and high-precision checks of every closed form of Tian et al. 2023 (Scan and Snap).

* ``scan_snap.symbolic_printed_forms``: each derived expression equals the paper's printed
  one (sympy), each stable rewrite equals its derivation, and every erratum differs.
* ``scan_snap.high_precision``: numpy agrees with mpmath at 50 digits at random parameters;
  a 1e-6 nudge of eta_Y in gamma(t) is rejected by the same tolerance.
"""

from __future__ import annotations

from ...symbolic import register_topic_checks

symbolic_printed_forms, high_precision = register_topic_checks(
    "scan_snap", control_id="scan_snap.speed.gamma", control_param="eta_Y")
