"""Checks of the scan_snap closed forms (Tian, Wang, Chen, Du 2023): one module per part of the ids
(``scan_snap.<part>.*``), with the method in the name where a part has several (``_flow``,
``_torch``, ``_monte_carlo``); ``symbolic`` holds the topic-wide symbolic and high-precision checks.
"""
