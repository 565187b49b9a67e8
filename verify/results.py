"""The results store: every finished check run, written at once to an SQLite database.

One row per run, keyed by check id, settings, seed, profile, device and toolkit commit (:class:`Key`).
A run of ``python -m verify`` writes each result the moment it arrives (``--store PATH``; by
default ``results.sqlite`` beside the report), so that an interrupted run loses nothing and
``--resume`` computes only what is not stored yet. SQLite in WAL mode with a busy timeout lets
two runs share one store: each write is one transaction (a row is there whole or not at all), and
a second writer waits instead of failing.

``load(path)`` returns the store as a pandas DataFrame (pandas is the ``tables`` extra).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sqlite3
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .registry import CheckResult

__all__ = ["Key", "Store", "load", "toolkit_commit", "SCHEMA_VERSION"]

#: Version of the table layout (a store of another version is refused, not rewritten).
SCHEMA_VERSION = 1

_COLUMNS = ("check_id", "settings", "seed", "profile", "device", "commit_id")
_CREATE = f"""
CREATE TABLE IF NOT EXISTS results (
    check_id TEXT NOT NULL, settings TEXT NOT NULL, seed INTEGER NOT NULL, profile TEXT NOT NULL,
    device TEXT NOT NULL, commit_id TEXT NOT NULL,
    passed INTEGER NOT NULL, discrepancy REAL, tolerance REAL, seconds REAL, error TEXT,
    result TEXT NOT NULL, figures TEXT NOT NULL, finished TEXT NOT NULL,
    PRIMARY KEY ({", ".join(_COLUMNS)})
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@cache
def toolkit_commit() -> str:
    """The git commit of the toolkit's checkout (with ``+dirty.<digest of the diff>`` when tracked
    files differ from it), else ``v<version>`` of the installed package."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        diff = subprocess.run(["git", "-C", str(root), "diff", "HEAD"], capture_output=True, timeout=30,
                              check=True).stdout
        # uncommitted edits: a digest of the diff, so that runs of different edits do not share a key
        return head + (f"+dirty.{hashlib.sha1(diff).hexdigest()[:10]}" if diff else "")
    except (OSError, subprocess.SubprocessError):
        from theory import __version__

        return "v" + __version__


def canonical(settings: dict | None) -> str:
    """Settings as canonical JSON (sorted keys, no spaces): the store's key for them."""
    return json.dumps(settings or {}, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Key:
    """What identifies a run: check id, settings (canonical JSON), seed, profile, device, commit."""

    check_id: str
    settings: str
    seed: int
    profile: str
    device: str
    commit_id: str

    @classmethod
    def of(cls, check_id: str, *, seed: int, profile: str, device: str = "cpu", settings: dict | None = None,
           commit_id: str | None = None) -> "Key":
        return cls(check_id, canonical(settings), int(seed), profile, device,
                   commit_id if commit_id is not None else toolkit_commit())


class Store:
    """An SQLite results store at ``path`` (created with its folder when missing).

    ``put(key, result)`` writes one run (replacing a run of the same key); ``get(key)`` returns
    the stored :class:`~verify.registry.CheckResult` or None; ``keys()`` the stored keys.
    """

    def __init__(self, path, *, timeout: float = 60.0):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise ValueError(f"--store: {str(self.path)!r} is not a file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            with self._transaction():
                for statement in _CREATE.strip().split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                row = self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif int(row[0]) != SCHEMA_VERSION:
                    raise ValueError(f"--store: {str(self.path)!r} has schema version {row[0]}, "
                                     f"this toolkit writes {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"--store: {str(self.path)!r} is not a results store ({exc})") from None

    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind, value, tb):
                db.execute("COMMIT" if kind is None else "ROLLBACK")
                return False

        return _Tx()

    def put(self, key: Key, result: CheckResult) -> None:
        """Write one finished run (one transaction)."""
        row = result.as_json()
        figures = json.dumps(result.figures or {}, default=_plain)
        finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        values = (key.check_id, key.settings, key.seed, key.profile, key.device, key.commit_id,
                  int(bool(result.passed)), _real(result.discrepancy), _real(result.tolerance),
                  float(result.seconds), result.error, json.dumps(row), figures, finished)
        with self._transaction():
            self._db.execute(f"INSERT OR REPLACE INTO results VALUES ({', '.join('?' * len(values))})", values)

    def get(self, key: Key) -> CheckResult | None:
        """The stored result of ``key``, or None."""
        row = self._db.execute(
            f"SELECT result, figures FROM results WHERE {' AND '.join(f'{c} = ?' for c in _COLUMNS)}",
            tuple(key.__dict__[c] for c in ("check_id", "settings", "seed", "profile", "device", "commit_id")),
        ).fetchone()
        return None if row is None else _result(json.loads(row[0]), json.loads(row[1]))

    def keys(self) -> set[Key]:
        return {Key(*r) for r in self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM results")}

    def mean_seconds(self) -> dict[str, float]:
        """check id -> the mean wall time of its stored runs (what a scheduler orders tasks by)."""
        return {cid: float(sec) for cid, sec in
                self._db.execute("SELECT check_id, AVG(seconds) FROM results GROUP BY check_id")}

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _plain(x):
    """JSON for what a figure spec may hold besides lists and numbers (numpy, torch)."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def _real(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and abs(v) != float("inf") else None


def _result(d: dict, figures: dict) -> CheckResult:
    fields = {f: d.get(f) for f in CheckResult.__dataclass_fields__ if f not in ("figures", "drawn")}
    for f in ("discrepancy", "tolerance", "seconds"):
        fields[f] = float(fields[f]) if fields[f] is not None else float("nan")
    return CheckResult(**fields, figures=figures)


def load(path):
    """The store at ``path`` as a pandas DataFrame: one row per run, the key columns, ``passed``,
    ``discrepancy``, ``tolerance``, ``ratio`` (discrepancy / tolerance), ``seconds``, ``error``,
    ``finished`` and the settings expanded to one column each (``setting.<name>``)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("verify.results.load needs pandas: pip install 'attention-dynamics-theory[tables]'") \
            from None
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no results store at {str(path)!r}")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        df = pd.read_sql_query("SELECT check_id, settings, seed, profile, device, commit_id, passed, discrepancy, "
                               "tolerance, seconds, error, finished FROM results ORDER BY check_id, seed", db)
    df["passed"] = df["passed"].astype(bool)
    df["ratio"] = df["discrepancy"] / df["tolerance"]
    expanded = pd.json_normalize([json.loads(s) for s in df["settings"]]) if len(df) else pd.DataFrame()
    for col in expanded.columns:
        df[f"setting.{col}"] = expanded[col].to_numpy()
    return df
