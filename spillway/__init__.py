"""Spillway: a GPU ETL job service. One import name for the repo's three packages.

The repository keeps its layout (``jobs/``, ``cluster/``, ``service/`` at the top, the design's
shape); they are imported as ``spillway.jobs``, ``spillway.cluster`` and ``spillway.service``, so an
installed wheel claims one name in site-packages, not three generic ones. A wheel has them inside
this package (pyproject's ``package-dir``); a source checkout (the tests, a tree copied to the GPU
machine with ``PYTHONPATH``) has them beside it, and this package's path reaches there.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "jobs" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 - a package's own __path__
