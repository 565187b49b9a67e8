"""Checks of the preconditioned_gd closed forms (Ahn, Cheng, Daneshmand, Sra 2023): one module per part of the ids
(``preconditioned_gd.<part>.*``), with the method in the name where a part has several (``_flow``,
``_torch``, ``_monte_carlo``); ``symbolic`` holds the topic-wide symbolic and high-precision checks.
"""
