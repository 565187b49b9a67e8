"""See the package docstring of :mod:`verify`."""
