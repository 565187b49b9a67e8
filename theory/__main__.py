"""``python -m theory``: see :mod:`theory.cli`."""

from .cli import main

raise SystemExit(main())
