"""Word-level text corpora for causal language modelling (Bao, Hataya, Karakida 2024, Sec. 7).

The paper trains its language models on WikiText-2 (Merity et al. 2016). Nothing can be
downloaded by the toolkit, so two sources share one tokenisation:

* :func:`load_wikitext2` reads the WikiText-2 token files ``wiki.train.tokens``,
  ``wiki.valid.tokens``, ``wiki.test.tokens`` from a folder the user gives (the environment
  variable :data:`WIKITEXT2_ENV` names it for the checks);
* :func:`load_pydoc` uses a corpus that ships with every Python installation: the English text of
  the reference manual's topics in :mod:`pydoc_data.topics` (about 0.5 MB; its content differs
  between Python versions, so :attr:`Corpus.source` records the version).

Tokenisation (documented, the same for both)
--------------------------------------------
WikiText is already word-level: one paragraph per line, words and punctuation separated by
spaces. A line becomes ``line.split() + ["<eos>"]``, the convention of the usual WikiText
language-model readers (an empty line gives ``<eos>`` alone). The pydoc text is first put in
that form by :func:`wikitext_lines`: paragraphs are the blocks between blank lines; lines with no
letter or digit (rules, heading underlines, table borders) are dropped; a paragraph's other lines
are joined by one space; each run of word characters (``\\w+``) and each other non-space character
is one token. The vocabulary (:func:`build_vocabulary`) holds the ``vocab_size - 1`` most
frequent tokens of the **training** split (ties in alphabetical order) and ``<unk>`` (id 0), which
every other token maps to; ``vocab_size=None`` keeps every training token.

Splits: WikiText's files are its splits. The pydoc topics are documents, taken in the sorted
order of their keys; document ``k`` goes to ``valid`` when ``k % 10 == 5``, to ``test`` when
``k % 10 == 0``, else to ``train`` (an article-level split, as WikiText's; with Python 3.11's
topics about 85k, 8.0k and 7.8k tokens).

Contains
--------
:class:`Corpus`            vocabulary and the three splits as token-id arrays
:func:`load_wikitext2`     the WikiText-2 token files in a folder
:func:`load_pydoc`         the pydoc_data topics
:func:`load_corpus`        either, by name (``"pydoc"``, ``"wikitext2"``, ``"auto"``)
:func:`wikitext_lines`     raw text -> WikiText-format lines
:func:`tokenize_lines`     lines -> tokens (``split`` + ``<eos>``)
:func:`build_vocabulary`   the capped vocabulary with ``<unk>``
:func:`sample_windows`     random training windows (inputs, next-token targets)
:func:`eval_windows`       consecutive non-overlapping windows of a split

References
----------
.. [1] S. Merity, C. Xiong, J. Bradbury, R. Socher, "Pointer sentinel mixture models", 2016
   (WikiText-2).
.. [2] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024, Sec. 7.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from .. import validate

__all__ = ["UNK", "EOS", "SPLITS", "WIKITEXT2_FILES", "WIKITEXT2_ENV", "Corpus", "wikitext_lines", "tokenize_lines",
           "build_vocabulary", "load_wikitext2", "load_pydoc", "load_corpus", "sample_windows", "eval_windows"]

UNK, EOS = "<unk>", "<eos>"
SPLITS = ("train", "valid", "test")
WIKITEXT2_FILES = {s: f"wiki.{s}.tokens" for s in SPLITS}
#: The environment variable the checks read for the folder of the WikiText-2 token files.
WIKITEXT2_ENV = "WIKITEXT2_DIR"

_TOKEN = re.compile(r"\w+|[^\w\s]")
_HAS_WORD = re.compile(r"[^\W_]")  # a letter or a digit


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: ``vocab[i]`` is the token of id ``i`` (``vocab[0] == "<unk>"``), and
    ``train``, ``valid``, ``test`` are int64 arrays of token ids."""

    name: str
    vocab: tuple[str, ...]
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    source: str = ""
    stats: dict = field(default_factory=dict, compare=False)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {name!r}")
        return getattr(self, name)

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.vocab[int(i)] for i in ids)


def wikitext_lines(text: str) -> list[str]:
    """Raw English text -> WikiText-format lines: one line per paragraph (blocks between blank
    lines), lines without a letter or digit dropped, tokens (``\\w+`` runs and single other
    non-space characters) separated by one space."""
    if not isinstance(text, str):
        raise ValueError(f"text: expected a str, got {type(text).__name__}")
    out = []
    for para in re.split(r"\n[ \t]*\n", text):
        kept = [ln for ln in para.splitlines() if _HAS_WORD.search(ln)]
        if kept:
            out.append(" ".join(_TOKEN.findall(" ".join(kept))))
    return out


def tokenize_lines(lines: Iterable[str]) -> list[str]:
    """WikiText-format lines -> tokens: each line gives ``line.split() + ["<eos>"]``."""
    toks: list[str] = []
    for line in lines:
        toks.extend(line.split())
        toks.append(EOS)
    return toks


def build_vocabulary(tokens: Iterable[str], vocab_size: int | None = None) -> tuple[str, ...]:
    """``("<unk>", most frequent tokens...)``: at most ``vocab_size`` entries (all distinct tokens
    when None); ties in frequency in alphabetical order; ``<unk>`` is id 0 whether or not the
    text contains it."""
    counts = Counter(tokens)
    counts.pop(UNK, None)
    if vocab_size is not None:
        vocab_size = validate.integer("vocab_size", vocab_size, low=2)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    if vocab_size is not None:
        ranked = ranked[:vocab_size - 1]
    return (UNK, *ranked)


def _encode(tokens: list[str], index: dict[str, int]) -> np.ndarray:
    return np.fromiter((index.get(w, 0) for w in tokens), dtype=np.int64, count=len(tokens))


def _corpus(name: str, split_tokens: dict[str, list[str]], vocab_size, source: str) -> Corpus:
    vocab = build_vocabulary(split_tokens["train"], vocab_size)
    index = {w: i for i, w in enumerate(vocab)}
    ids = {s: _encode(split_tokens[s], index) for s in SPLITS}
    for s in SPLITS:
        if ids[s].size < 2:
            raise ValueError(f"{name}: the {s} split has fewer than 2 tokens")
    stats = {f"{s}_tokens": int(ids[s].size) for s in SPLITS}
    stats.update({f"{s}_unk_fraction": float(np.mean(ids[s] == 0)) for s in SPLITS})
    stats["distinct_train_tokens"] = len(set(split_tokens["train"]))
    return Corpus(name, vocab, ids["train"], ids["valid"], ids["test"], source, stats)


def load_wikitext2(path, vocab_size: int | None = None) -> Corpus:
    """The WikiText-2 token files ``wiki.{train,valid,test}.tokens`` in the folder ``path``.

    Parameters
    ----------
    path : str or Path
        Folder holding the three files (e.g. ``wikitext-2/`` of the official archive).
    vocab_size : int, optional
        Cap on the vocabulary (with ``<unk>``); None keeps the files' vocabulary (33,278 words with
        ``<eos>`` for WikiText-2).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path: expected a folder name, got {type(path).__name__}")
    root = Path(path)
    missing = [f for f in WIKITEXT2_FILES.values() if not (root / f).is_file()]
    if missing:
        raise ValueError(f"path: {str(root)!r} lacks the WikiText-2 token file(s) {', '.join(missing)}")
    split_tokens = {}
    for s, f in WIKITEXT2_FILES.items():
        with open(root / f, encoding="utf-8") as fh:
            split_tokens[s] = tokenize_lines(fh)
    return _corpus("wikitext2", split_tokens, vocab_size, f"WikiText-2 token files in {root}")


def load_pydoc(vocab_size: int | None = None) -> Corpus:
    """The English text of :mod:`pydoc_data.topics` as a word-level corpus (see the module
    docstring for the tokenisation and the document-level split)."""
    from pydoc_data.topics import topics

    split_tokens: dict[str, list[str]] = {s: [] for s in SPLITS}
    for k, key in enumerate(sorted(topics)):
        s = "valid" if k % 10 == 5 else "test" if k % 10 == 0 else "train"
        split_tokens[s].extend(tokenize_lines(wikitext_lines(topics[key])))
    version = ".".join(map(str, sys.version_info[:3]))
    return _corpus("pydoc", split_tokens, vocab_size, f"pydoc_data.topics of Python {version} ({len(topics)} topics)")


def load_corpus(name: str, vocab_size: int | None = None, path=None) -> Corpus:
    """``"pydoc"``, ``"wikitext2"`` (from ``path``, else the folder in ``$WIKITEXT2_DIR``), or
    ``"auto"`` (WikiText-2 when a folder is given either way, else pydoc)."""
    if name not in ("pydoc", "wikitext2", "auto"):
        raise ValueError(f"corpus: expected pydoc, wikitext2 or auto, got {name!r}")
    path = path if path is not None else os.environ.get(WIKITEXT2_ENV) or None
    if name == "wikitext2" and path is None:
        raise ValueError(f"corpus: wikitext2 needs the folder of its token files (set {WIKITEXT2_ENV})")
    if name == "pydoc" or (name == "auto" and path is None):
        return load_pydoc(vocab_size)
    return load_wikitext2(path, vocab_size)


def _window_args(ids, T, what):
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids: expected a 1-d array of token ids, got {ids.dtype} of shape {ids.shape}")
    T = validate.integer("T", T)
    if ids.size < T + 1:
        raise ValueError(f"T: {what} needs T + 1 <= {ids.size} tokens, got T = {T}")
    return ids, T


def sample_windows(rng: np.random.Generator, ids, T: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` windows of ``T + 1`` consecutive tokens at uniform random offsets: inputs
    ``(batch, T)`` and next-token targets ``(batch, T)`` (the inputs shifted by one)."""
    rng = validate.rng(rng)
    ids, T = _window_args(ids, T, "a window")
    batch = validate.integer("batch", batch)
    start = rng.integers(0, ids.size - T, size=batch)
    win = ids[start[:, None] + np.arange(T + 1)]
    return win[:, :-1], win[:, 1:]


def eval_windows(ids, T: int, max_windows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive non-overlapping windows of a split (the first ``max_windows`` when given):
    inputs and targets, each ``(windows, T)``."""
    ids, T = _window_args(ids, T, "one window")
    n = (ids.size - 1) // T
    if max_windows is not None:
        n = min(n, validate.integer("max_windows", max_windows))
    x = ids[: n * T].reshape(n, T)
    y = ids[1: n * T + 1].reshape(n, T)
    return x, y
