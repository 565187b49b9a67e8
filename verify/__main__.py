"""``python -m verify``: see :mod:`verify.cli`. Ctrl-C while starting up exits with status
130 and one line, like Ctrl-C during a run."""

import sys

if __name__ == "__main__":  # not when a spawned process (the figure drawer) imports it
    try:
        from .cli import main

        status = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    raise SystemExit(status)
