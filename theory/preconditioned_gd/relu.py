"""Placeholder: records are added here (Ahn et al. 2023, Theorem 5)."""
