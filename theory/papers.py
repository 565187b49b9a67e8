"""The papers the toolkit covers, keyed by the first part of a closed-form id.

One place for the bibliographic line of each topic, used by the documentation pages, the
errata page and the report.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Paper", "PAPERS", "paper_of"]


@dataclass(frozen=True)
class Paper:
    """A paper: ``topic`` (id prefix), short citation, title, venue, and the spec file."""

    topic: str
    cite: str
    title: str
    venue: str
    spec: str


PAPERS: dict[str, Paper] = {p.topic: p for p in (
    Paper("linear_attention", "Zhang, Singh, Latham, Saxe 2025",
          "Training Dynamics of In-Context Learning in Linear Attention", "ICML 2025",
          "linear-attention-merged.md, linear-attention-separate.md"),
    Paper("preconditioned_gd", "Ahn, Cheng, Daneshmand, Sra 2023",
          "Transformers learn to implement preconditioned gradient descent for in-context learning",
          "NeurIPS 2023", "preconditioned-gd.md"),
    Paper("localization", "Bao, Hataya, Karakida 2024",
          "Self-attention Networks Localize When QK-eigenspectrum Concentrates", "ICML 2024",
          "attention-localization.md"),
    Paper("scan_snap", "Tian, Wang, Chen, Du 2023",
          "Scan and Snap: Understanding Training Dynamics and Token Composition in 1-layer Transformer",
          "NeurIPS 2023", "scan-and-snap.md"),
)}


def paper_of(id: str) -> Paper:
    """The paper of closed form or check ``id`` (by its first dotted part)."""
    topic = id.split(".", 1)[0]
    try:
        return PAPERS[topic]
    except KeyError:
        raise ValueError(f"id: no paper registered for topic {topic!r}") from None
