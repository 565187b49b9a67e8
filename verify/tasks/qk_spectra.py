"""Random instances of the localization analysis of Bao, Hataya, Karakida 2024 (Sec. 3-5):
a dimension, an anisotropic covariance and a symmetric ``W_QK`` whose eigenvalues are
``N(m, s^2)`` (the QK-eigenspectrum whose concentration the paper studies).
"""

from __future__ import annotations

import numpy as np

from verify.tasks.random_walk import anisotropic_covariance

__all__ = ["symmetric_with_spectrum", "qk_draws"]


def symmetric_with_spectrum(rng, eigs):
    Q, _ = np.linalg.qr(rng.standard_normal((len(eigs), len(eigs))))
    W = (Q * eigs) @ Q.T
    return 0.5 * (W + W.T)


def qk_draws(rng, n):
    """n random (d, Sigma, symmetric W_QK): d in 2..16, anisotropic Sigma, eigenvalues N(m, s^2)."""
    for _ in range(n):
        d = int(rng.integers(2, 17))
        Sigma = anisotropic_covariance(rng, d) + 1e-3 * np.eye(d)
        eigs = rng.normal(rng.uniform(-1, 1), rng.uniform(0.05, 1.0), size=d)
        yield d, Sigma, symmetric_with_spectrum(rng, eigs)
