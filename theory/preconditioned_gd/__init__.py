"""Ahn, Cheng, Daneshmand, Sra 2023: linear transformers implement preconditioned gradient descent.

Modules: :mod:`.single_layer` (Theorem 1, the single-layer optimum, and its identity with
the merged linear-attention minimum of Zhang et al. 2025), :mod:`.multi_layer` (Wishart
moments, the exact L-layer loss on the sparse set of eq. 8, optimal step sizes, Theorems
2-4) and :mod:`.relu` (Theorem 5, ReLU attention).
"""
