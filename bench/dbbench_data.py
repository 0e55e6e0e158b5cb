"""db-benchmark's data, ported from its R generators to numpy and written as parquet.

The originals are ``_data/groupby-datagen.R`` and ``_data/join-datagen.R`` of
h2oai/db-benchmark (continued as duckdblabs/db-benchmark). This port keeps their
shapes, value ranges, key-matching design and the order in which columns are drawn:

* groupby ``G1_<N>_1e2_0_0``: ``id1``, ``id2`` strings ``id001``..``id100`` (K = 100 groups),
  ``id3`` strings ``id0000000001``.. (N/K groups), ``id4``, ``id5`` ints 1..K, ``id6`` ints
  1..N/K, ``v1`` ints 1..5, ``v2`` ints 1..15, ``v3`` uniform [0, 100) rounded to 6 decimals;
  no NAs, unsorted.
* join ``J1_<N>_NA_0_0``: for each key level (small N/1e6, medium N/1e3, big N distinct keys)
  a random permutation of 1..1.1n is split into 90 % keys both sides have, 10 % only the
  left (``x``) has and 10 % only the right has. ``x`` (N rows) draws ``id1``..``id3`` so that
  every one of its keys appears at least once; the right tables ``small`` (``id1``),
  ``medium`` (``id1``, ``id2``) and ``big`` (``id1``..``id3``) hold each of their keys of
  the joined level exactly once. ``id4``..``id6`` are ``"id"`` + ``id1``..``id3``; ``v1``
  (``x``) and ``v2`` (right tables) are uniform [0, 100) rounded to 6 decimals. About 90 %
  of ``x``'s rows find a match.

Where this deviates, on purpose:

* Random numbers come from numpy's PCG64 seeded with ``seed`` (108, R's ``set.seed(108)``,
  by default), not R's Mersenne Twister and its rejection sampler: the same distributions,
  not the same values, so answers are not comparable digit for digit with published ones.
* Parquet instead of one CSV: several files of at most 1e6-row row groups, so Dask has
  partitions; types are those the benchmark's readers cast to (int32 ids and ``v1``/``v2``
  in groupby, int32 keys in join, float64 values, plain strings).
* Below N = 1e7 (the R join script refuses it) ``small`` and ``medium`` get at least 10 keys,
  so that the 90/10/10 split still has a left-only and a right-only key.
* The NA and sorted variants (the R scripts' ``nas`` and ``sort`` arguments) are not ported:
  db-benchmark's headline runs use neither.

Files are cached under ``<work>/data`` by (N, seed) and the generator version; a directory
appears only when complete (written aside, then renamed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import build_once, side_by_side

#: Bumped when the generated data changes, so stale caches are not reused.
GENERATOR_VERSION = 1
DEFAULT_SEED = 108
GROUPS_K = 100
ROWS_PER_FILE = 1_000_000
MAX_FILES = 32


@dataclass(frozen=True)
class DataSet:
    """Where one size's tables are: the groupby table ``x`` and the join tables."""

    rows: int
    seed: int
    groupby: dict[str, Path]
    join: dict[str, Path]

    def tables(self, workload: str) -> dict[str, Path]:
        return self.groupby if workload == "groupby" else self.join


def pretty_rows(rows: int) -> str:
    """``10000000`` → ``1e7``, as db-benchmark names its data; other counts as they are."""
    exponent = round(math.log10(rows)) if rows > 0 else 0
    return f"1e{exponent}" if rows == 10**exponent else str(rows)


def ensure_data(
    work: Path,
    rows: int,
    seed: int = DEFAULT_SEED,
    *,
    workloads: Collection[str] = ("groupby", "join"),
    log: Callable[[str], None] | None = None,
) -> DataSet:
    """Generate (or reuse) the tables of ``workloads`` (groupby, join) of ``rows`` rows under ``work/data``.

    A workload left out gets no tables (join's take minutes to write at 1e8).
    """
    root = work / "data"
    name = f"{pretty_rows(rows)}_seed{seed}_v{GENERATOR_VERSION}"
    groupby: dict[str, Path] = {}
    join: dict[str, Path] = {}
    if "groupby" in workloads:
        groupby_dir = build_once(root / f"G1_{name}", lambda d: write_groupby(d, rows, seed), log)
        groupby = {"x": groupby_dir / "x"}
    if "join" in workloads:
        join_dir = build_once(root / f"J1_{name}", lambda d: write_join(d, rows, seed), log)
        join = {table: join_dir / table for table in ("x", "small", "medium", "big")}
    return DataSet(rows=rows, seed=seed, groupby=groupby, join=join)


def _labels(values: np.ndarray, width: int | None = None) -> pa.Array:
    """``"id"`` + the integer, zero-padded to ``width`` digits when given (R's sprintf)."""
    text = pc.cast(pa.array(values), pa.string())
    if width:
        text = pc.utf8_lpad(text, width=width, padding="0")
    return pc.binary_join_element_wise("id", text, "")


def _round6(values: np.ndarray) -> np.ndarray:
    return np.round(values, 6)


def write_groupby(directory: Path, rows: int, seed: int, k: int = GROUPS_K) -> dict[str, object]:
    """The G1 table ``x`` (groupby-datagen.R with K = ``k``, 0 % NA, unsorted)."""
    if rows % k:
        raise ValueError(f"rows ({rows}) must be a multiple of K ({k}), as id3/id6 have rows/K groups")
    rng = np.random.default_rng(seed)
    small_groups = rows // k

    def sample(n: int) -> np.ndarray:  # R's sample(n, N, TRUE): uniform on 1..n
        return rng.integers(1, n + 1, size=rows, dtype=np.int32)

    # Drawn in the R script's column order.
    drawn = {
        "_id1": sample(k),
        "_id2": sample(k),
        "_id3": sample(small_groups),
        "id4": sample(k),
        "id5": sample(k),
        "id6": sample(small_groups),
        "v1": sample(5),
        "v2": sample(15),
        "v3": _round6(rng.random(rows) * 100),
    }
    strings = {"id1": ("_id1", 3), "id2": ("_id2", 3), "id3": ("_id3", 10)}
    order = ["id1", "id2", "id3", "id4", "id5", "id6", "v1", "v2", "v3"]  # the R file's
    return {"x": _write_ordered(directory / "x", drawn, strings, order)}


def _write_ordered(directory: Path, drawn: dict[str, np.ndarray], strings: dict[str, tuple[str, int | None]], order: list[str]) -> dict[str, int]:
    """Write the ``order`` columns in files of at most ``ROWS_PER_FILE`` rows (``MAX_FILES`` at most).

    ``strings`` maps a string column to (the int column it labels, zero-pad width).
    """
    rows = len(next(iter(drawn.values())))
    files = max(1, min(MAX_FILES, math.ceil(rows / ROWS_PER_FILE)))
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    directory.mkdir(parents=True)

    def write_file(index: int) -> None:
        lo, hi = bounds[index], bounds[index + 1]
        arrays = {}
        for name in order:
            if name in strings:
                source, width = strings[name]
                arrays[name] = _labels(drawn[source][lo:hi], width)
            else:
                arrays[name] = pa.array(drawn[name][lo:hi])
        pq.write_table(pa.table(arrays), directory / f"part-{index:03d}.parquet", row_group_size=ROWS_PER_FILE)

    side_by_side(write_file, files)  # the values are all drawn already: the data does not depend on the order
    return {"rows": rows, "files": files}


def _split_xlr(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """join-datagen.R's split_xlr: a permutation of 1..1.1n cut into both (0.9n), left-only, right-only."""
    key = rng.permutation(np.arange(1, round(n * 1.1) + 1, dtype=np.int32))
    both = round(n * 0.9)
    return key[:both], key[both:n], key[n:]


def _sample_all(rng: np.random.Generator, keys: np.ndarray, size: int) -> np.ndarray:
    """join-datagen.R's sample_all: every key once, the rest drawn with replacement, shuffled."""
    if len(keys) > size:
        raise ValueError(f"cannot place {len(keys)} keys in {size} rows")
    extra = rng.choice(keys, size=size - len(keys), replace=True)
    return rng.permutation(np.concatenate([keys, extra]))


def join_sizes(rows: int) -> dict[str, int]:
    """Rows (= distinct keys of the joined level) of each right table; see the module note for < 1e7."""
    return {"small": max(rows // 10**6, 10), "medium": max(rows // 10**3, 10), "big": rows}


def write_join(directory: Path, rows: int, seed: int) -> dict[str, object]:
    """The J1 tables ``x``, ``small``, ``medium``, ``big`` (join-datagen.R, 0 % NA, unsorted)."""
    sizes = join_sizes(rows)
    if sizes["medium"] > rows:
        raise ValueError(f"rows ({rows}) is too small for a join table set; use at least 1000")
    rng = np.random.default_rng(seed)
    keys = [_split_xlr(rng, sizes[level]) for level in ("small", "medium", "big")]

    def left(level: int) -> np.ndarray:
        both, left_only, _ = keys[level]
        return _sample_all(rng, np.concatenate([both, left_only]), rows)

    def right(level: int, size: int) -> np.ndarray:
        both, _, right_only = keys[level]
        return _sample_all(rng, np.concatenate([both, right_only]), size)

    written: dict[str, object] = {}
    x = {"id1": left(0), "id2": left(1), "id3": left(2)}
    x["v1"] = _round6(rng.random(rows) * 100)
    written["x"] = _write_join_table(directory / "x", x)
    del x
    for level, table in enumerate(("small", "medium", "big")):
        size = sizes[table]
        columns = {f"id{i + 1}": right(i, size) for i in range(level + 1)}
        columns["v2"] = _round6(rng.random(size) * 100)
        written[table] = _write_join_table(directory / table, columns)
    return written


def _write_join_table(directory: Path, columns: dict[str, np.ndarray]) -> dict[str, int]:
    # write_batches in the R script: id4..id6 from id1..id3, values last.
    ints = [name for name in ("id1", "id2", "id3") if name in columns]
    strings = {f"id{int(name[2]) + 3}": (name, None) for name in ints}
    values = [name for name in columns if name.startswith("v")]
    return _write_ordered(directory, columns, strings, [*ints, *strings, *values])
