"""Tian, Wang, Chen, Du 2023, "Scan and Snap": training dynamics of a 1-layer transformer.

Modules: :mod:`.h` (the h* recursion of eq. 33, its continuous counterpart eqs. 44-45 with the
Lambert-W solution and explicit inverse, Lemmas 7-9, the speed coefficient gamma(t), the time
scales t_0', t_0 and Corollary 1's epoch count) and :mod:`.attention` (Lemma 5, Theorems 2-4:
decoder weights, the attention-logit dynamics, the relative gain, and B_n(t) as printed,
corrected and under the literal-sum reading).
"""
