"""The toolkit's version, in one place: ``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``),
``theory.__version__`` and both command lines' ``--version`` print it."""

__version__ = "0.2.0"
