"""``python -m verify``: see :mod:`verify.cli`."""

from .cli import main

raise SystemExit(main())
