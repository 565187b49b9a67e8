"""Placeholder: records are added here (Bao et al. 2024)."""
