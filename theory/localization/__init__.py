"""Bao, Hataya, Karakida 2024: self-attention localises when the QK-eigenspectrum concentrates.

Modules: :mod:`.moments` (mean and variance of the linearised-softmax signal u_i under
random-walk tokens, Lemmas 1, 3, 4, eq. 22), :mod:`.probability` (the signal-propagation
probability rho: Gaussian approximation, the continuum form of eq. 6 as printed and
corrected, Lemma 2's limits) and :mod:`.gradient` (the QK-gradient of eq. 3, the
eigenspectrum variance of eq. 8, the bounds of eqs. 7, 9, 10 and the LOCATER regulariser).
"""
