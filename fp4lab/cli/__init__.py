"""The ``fp4lab`` command line: one module per command group (``formats``, ``analysis``, ``hw``, ``verify``,
``recipes``), the top-level parser in ``app`` and the ``--json`` / ``--json-out`` convention in ``output``.
Handlers import their heavy modules when they run, so ``fp4lab --help`` and ``fp4lab compare`` start fast."""

from .app import main

__all__ = ["main"]
