"""The Dask engine's join step gives the Polars engine's rows and columns (jobs/dask_joins.py).

Differential cases, on real parquet files, for shapes where pandas' merge differed from Polars
and docs/spec.md ("Joins"):

* a right column or key named as a left column, with a ``where`` on a left or outer join
  (KeyError on Dask: the pairs lacked the suffixed column the condition's output names);
* ``left_on: [k]``, ``right_on: [k]``: pandas' merge made one column of the two keys,
  Polars keeps ``k`` and ``k_right`` as the docs say;
* text with a parquet dictionary (read by dask as a categorical): two files' category sets of
  different dtypes, as an empty file gives, failed the merge ("dtype of categories must be the same");
* an outer join of a ``uint8`` key with an ``int64`` one where a side has no rows (pandas' outer
  merge raised "boolean value of NA is ambiguous").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spillway.jobs.errors import SpecError
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec
from tests.test_engines import assert_same_rows, run_both
from tests.test_join_key_types import dask_rows, polars_rows

HOWS = ["inner", "left", "right", "outer", "semi", "anti"]


def _write(path: Path, columns: dict[str, pa.Array | list[Any]]) -> None:
    pq.write_table(pa.table(columns), path)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dask_joins")
    # Both sides have k, a and v: every right column but an on= key clashes with a left one.
    _write(root / "left.parquet", {"k": pa.array([1, 2, 3, None], pa.int64()), "a": ["x", "y", "z", "n"], "v": [1, 2, 3, 4]})
    _write(root / "right.parquet", {"k": pa.array([1, 1, 3, None], pa.int64()), "a": ["p", "q", "r", "s"], "v": [10, 0, 30, 40]})
    # A right side whose key j has another name, and whose k (not a key) clashes with the left's k.
    _write(root / "other.parquet", {"j": pa.array([1, 2, 5], pa.int64()), "k": pa.array([7, 8, 9], pa.int64()), "w": ["o1", "o2", "o5"]})
    # Text with a parquet dictionary: pandas categoricals whose categories dask learns per file.
    _write(root / "coded.parquet", {"t": pa.array(["1", "2", None]).dictionary_encode(), "d": pa.array(["d1", "d2", "dn"]).dictionary_encode()})
    _write(root / "coded_other.parquet", {"t": pa.array(["2", "3", None]).dictionary_encode(), "d": pa.array(["e2", "e3", "en"]).dictionary_encode()})
    _write(root / "coded_empty.parquet", {"t": pa.array([], pa.string()).dictionary_encode(), "d": pa.array([], pa.string()).dictionary_encode()})
    _write(root / "text.parquet", {"t": pa.array(["1", "2", None]), "d": ["s1", "s2", "sn"]})
    _write(root / "text_empty.parquet", {"t": pa.array([], pa.string()), "d": pa.array([], pa.string())})
    mixed = root / "coded_dir"  # one source of two files, one of them empty: its partitions' categories differ too
    mixed.mkdir()
    _write(mixed / "a.parquet", {"t": pa.array(["2", "3"]).dictionary_encode(), "d": pa.array(["m2", "m3"]).dictionary_encode()})
    _write(mixed / "b.parquet", {"t": pa.array([], pa.string()).dictionary_encode(), "d": pa.array([], pa.string()).dictionary_encode()})
    # Unsigned and signed integer keys, with and without rows.
    _write(root / "u8.parquet", {"n": pa.array([1, 2, None], pa.uint8()), "b": ["u1", "u2", "un"]})
    _write(root / "u8_empty.parquet", {"n": pa.array([], pa.uint8()), "b": pa.array([], pa.string())})
    _write(root / "i64.parquet", {"n": pa.array([2, 3, None], pa.int64()), "c": ["i2", "i3", "in"]})
    _write(root / "i64_empty.parquet", {"n": pa.array([], pa.int64()), "c": pa.array([], pa.string())})
    _write(root / "i64_named.parquet", {"m": pa.array([2, 3, None], pa.int64()), "c": ["i2", "i3", "in"]})
    _write(root / "i64_named_empty.parquet", {"m": pa.array([], pa.int64()), "c": pa.array([], pa.string())})
    return root


def _source(data: Path, name: str) -> dict[str, str]:
    path = data / name if (data / name).is_dir() else data / f"{name}.parquet"
    return {"format": "parquet", "path": str(path)}


def job(data: Path, left: str, right: str, **step: Any) -> JobSpec:
    """``left`` joined with ``right`` (parquet files under ``data``) as ``step`` says."""
    return JobSpec.model_validate({"source": _source(data, left), "steps": [{"op": "join", "right": _source(data, right), **step}],
                                   "sink": {"path": "/tmp/unused"}})


def same_on_both(spec: JobSpec) -> Any:
    """The job's rows on the Polars engine (as pandas), after checking that the Dask engine gives the same."""
    on_dask, on_polars = run_both(spec)
    assert_same_rows(on_dask, on_polars, ordered=False)
    return on_polars


# --- a where over names that clash (bug 1) -------------------------------------------------------------------------------

_CLASHING_WHERE = {
    "on=k, right's v suffixed": ({"on": ["k"]}, "v_right > v"),
    "left_on=k, right_on=k": ({"left_on": ["k"], "right_on": ["k"]}, "v_right > v"),
    "left_on=k, right_on=k, reading k_right": ({"left_on": ["k"], "right_on": ["k"]}, "coalesce(k_right, 0) + v_right >= 11"),
}


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("case", list(_CLASHING_WHERE))
def test_a_where_over_clashing_names(data: Path, case: str, how: str) -> None:
    keys, where = _CLASHING_WHERE[case]
    out = same_on_both(job(data, "left", "right", how=how, where=where, **keys))
    if how == "left":  # x (k 1) meets p (v 10 > 1); y, z and n meet no pair under the condition but are kept once
        assert sorted(out["a"]) == ["n", "x", "y", "z"]


@pytest.mark.parametrize("how", HOWS)
def test_a_right_key_named_as_a_left_column_that_is_no_key(data: Path, how: str) -> None:
    """left_on [k] with right_on [j]: the right's k is no key, and comes out as k_right."""
    same_on_both(job(data, "left", "other", how=how, left_on=["k"], right_on=["j"]))
    same_on_both(job(data, "left", "other", how=how, left_on=["k"], right_on=["j"], where="k_right != 8"))


@pytest.mark.parametrize("how", ["left", "right", "outer", "semi", "anti"])
def test_a_keyless_where_over_clashing_names(data: Path, how: str) -> None:
    """A range join (no keys) with a where, every right column suffixed."""
    same_on_both(job(data, "left", "right", how=how, where="k_right > k and v_right > v"))


# --- left_on and right_on of one name keep both columns (bug 2) ---------------------------------------------------------

@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_keys_of_one_name_keep_both_columns(data: Path, how: str) -> None:
    out = same_on_both(job(data, "left", "right", how=how, left_on=["k"], right_on=["k"]))
    assert list(out.columns) == ["k", "a", "v", "k_right", "a_right", "v_right"]
    matched = out[out["a"].notna() & out["a_right"].notna()]
    assert sorted(zip(matched["k"], matched["k_right"], strict=True)) == [(1, 1), (1, 1), (3, 3)]


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer", "semi", "anti"])
def test_two_keys_paired_crosswise(data: Path, how: str) -> None:
    """left_on [k, v] with right_on [v, k]: each pair compares columns of different names, both kept."""
    same_on_both(job(data, "left", "right", how=how, left_on=["k", "v"], right_on=["v", "k"]))


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_a_self_join_with_another_suffix(data: Path, how: str) -> None:
    out = same_on_both(job(data, "left", "left", how=how, left_on=["k"], right_on=["k"], right_suffix="_2"))
    assert list(out.columns) == ["k", "a", "v", "k_2", "a_2", "v_2"]


def test_a_suffixed_name_that_the_left_has_is_refused_before_either_engine_runs(data: Path) -> None:
    """A left column already named k_right: the right's k would come out under that name too (a 422, as docs/spec.md says)."""
    spec = JobSpec.model_validate({"source": _source(data, "left"),
                                   "steps": [{"op": "rename", "columns": {"a": "k_right"}},
                                             {"op": "join", "right": _source(data, "right"), "left_on": ["k"], "right_on": ["k"]}],
                                   "sink": {"path": "/tmp/unused"}})
    with pytest.raises(SpecError) as refused:
        plan_spec(spec)
    assert refused.value.field == "steps[1].right_suffix"


# --- dictionary text (categoricals) and empty files (bug 3) -------------------------------------------------------------

_CODED = [("coded", "coded_other"), ("coded", "coded_empty"), ("coded_empty", "coded"), ("coded_empty", "coded_empty"),
          ("coded", "text"), ("text", "coded"), ("coded", "text_empty"), ("coded_empty", "text_empty"), ("text_empty", "coded"),
          ("coded", "coded_dir"), ("coded_dir", "text")]


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize(("left", "right"), _CODED)
def test_dictionary_text_keys_join_as_text(data: Path, left: str, right: str, how: str) -> None:
    same_on_both(job(data, left, right, how=how, on=["t"]))


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize(("left", "right"), [("coded", "coded_empty"), ("coded_empty", "coded"), ("coded", "text_empty"), ("coded_dir", "coded")])
def test_dictionary_text_keys_with_a_where(data: Path, left: str, right: str, how: str) -> None:
    """The non-key column d is dictionary text on some sides too, and the condition reads its suffixed copy."""
    same_on_both(job(data, left, right, how=how, on=["t"], where="d_right != 'nothing'"))


def test_dictionary_text_matches_its_values(data: Path) -> None:
    out = same_on_both(job(data, "coded", "coded_dir", how="outer", on=["t"]))
    assert sorted((row.t, row.d, row.d_right) for row in out.astype(object).where(out.notna(), None).itertuples()
                  if row.t is not None) == [("1", "d1", None), ("2", "d2", "m2"), ("3", None, "m3")]


# --- unsigned and signed integer keys, empty sides (bug 3) --------------------------------------------------------------

_INTEGERS = [("u8", "i64"), ("i64", "u8"), ("u8", "i64_empty"), ("u8_empty", "i64"), ("i64_empty", "u8"), ("u8_empty", "i64_empty")]


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize(("left", "right"), _INTEGERS)
def test_an_unsigned_key_joins_a_signed_one(data: Path, left: str, right: str, how: str) -> None:
    same_on_both(job(data, left, right, how=how, on=["n"]))
    same_on_both(job(data, left, right, how=how, on=["n"], where="n > 0"))


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("right", ["i64_named", "i64_named_empty"])
def test_an_unsigned_key_and_a_signed_one_of_other_names_keep_their_types(data: Path, right: str, how: str) -> None:
    """With left_on/right_on each side keeps its own key column in its own type, as on Polars: the outer join's
    widened comparison type does not leak into the output."""
    spec = job(data, "u8", right, how=how, left_on=["n"], right_on=["m"])
    same_on_both(spec)
    assert str(dask_rows(spec)["n"].dtype) == "UInt8" and str(polars_rows(spec).schema["n"]) == "UInt8"
    assert str(dask_rows(spec)["m"].dtype) == "Int64" and str(polars_rows(spec).schema["m"]) == "Int64"
