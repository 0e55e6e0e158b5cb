"""The TPC-H examples as data, for tests/test_tpch.py and bench/gpu_tpch.py alike.

The specs of ``examples/tpch`` (``{data}`` stands for a tpchgen-cli output directory),
their official SQL beside them in ``examples/tpch/sql``, the table names, where
tpchgen-cli is, and how an answer's columns are made comparable with DuckDB's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spillway.service.documents import read_mapping

SPECS = Path(__file__).resolve().parents[1] / "examples" / "tpch"
TABLES = ("region", "nation", "customer", "supplier", "part", "partsupp", "orders", "lineitem")
# The official SQL of each query with its validation parameters; DuckDB's answer is the referee.
QUERIES: dict[str, str] = {path.stem: path.read_text() for path in sorted((SPECS / "sql").glob("q*.sql"))}


def tpchgen() -> str | None:
    """tpchgen-cli beside this Python (a venv) or on the PATH."""
    beside_python = Path(sys.executable).parent / "tpchgen-cli"
    return str(beside_python) if beside_python.exists() else shutil.which("tpchgen-cli")


def write_tables(binary: str, out: Path, sf: float, parts: int) -> None:
    """``tpchgen-cli`` parquet at scale factor ``sf`` into ``out``: each table a directory of ``parts`` files."""
    subprocess.run([binary, "parquet", "--scale-factor", f"{sf:g}", "--parts", str(parts), "--output-dir", str(out), "--quiet"], check=True)


def load_spec(name: str, data: Path, out: Path) -> dict[str, Any]:
    """The example spec with ``{data}`` filled in, read as the CLI reads it, writing to ``out``."""
    filled = out.parent / f"{name}.yaml"
    filled.write_text((SPECS / f"{name}.yaml").read_text().replace("{data}", str(data)))
    spec = read_mapping(filled, "name, sources, source, steps, sink")
    spec["sink"]["path"] = str(out)
    return spec


def plain_column(column: pd.Series) -> pd.Series:
    """Decimals as floats and dates as timestamps, so both sides compare alike."""
    values = column.dropna()
    if len(values) and all(isinstance(v, (int, float, np.number)) or type(v).__name__ == "Decimal" for v in values):
        return column.astype("float64")
    if pd.api.types.is_datetime64_any_dtype(column) or (len(values) and all(hasattr(v, "isoformat") for v in values)):
        return pd.to_datetime(column).astype("datetime64[us]")
    return column
