"""Shared test configuration: hypothesis profiles, mpmath precision hygiene, report header.

Hypothesis profiles
-------------------
``dev``
    Few examples, no deadline: quick local runs.
``ci``
    Derandomized (the same examples on every run), no example database, no deadline,
    the reproduction blob printed on failure, and the ``too_slow`` health check off
    (symbolic evaluation inside a property can be slow on a busy machine).

The profile comes from the environment variable ``HYPOTHESIS_PROFILE``; without it, ``ci``
when ``CI`` is set and ``dev`` otherwise. A test that sets its own ``@settings`` keeps them.
"""

from __future__ import annotations

import os

import mpmath
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile(
    "ci",
    max_examples=50,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)

_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(_PROFILE)


@pytest.fixture(autouse=True)
def _restore_mpmath_precision():
    """Undo any change of the global mpmath precision made by a test."""
    prec = mpmath.mp.prec  # the binary precision determines dps
    yield
    mpmath.mp.prec = prec


def pytest_report_header(config):
    import importlib

    versions = []
    for name in ("numpy", "scipy", "sympy", "mpmath", "torch", "hypothesis"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            versions.append(f"{name} (not installed)")
            continue
        versions.append(f"{name} {getattr(mod, '__version__', '?')}")
    return [", ".join(versions), f"hypothesis profile: {_PROFILE}"]
