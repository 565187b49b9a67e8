"""Placeholder: records are added here (Tian et al. 2023)."""
