"""Checks of the ``saxe_linear`` topic; the core imports every module here through the entry point
``saxe_linear`` of the group ``attention_dynamics_theory.checks``.

* :mod:`.modes_flow`: the exact matrix gradient flow of both layers (scipy) against the closed forms;
* :mod:`.modes_torch`: a torch two-layer linear network trained by full-batch gradient descent;
* :mod:`.symbolic`: the core's per-topic symbolic and high-precision checks.
"""
