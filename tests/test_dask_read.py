"""The Dask engine's parquet read on pandas: decimals and dates made plain in Arrow, not through Python objects."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

from spillway.jobs.dask_read import _decimal_to_float64, plain_arrow_table, read_source
from spillway.jobs.pipeline import backend_config
from spillway.jobs.spec import SourceSpec

# 32986.52 is one of the TPC-H prices that Arrow's own decimal → float64 cast misses by
# one unit in the last place (32986.520000000004).
PRICES = ["32986.52", None, "-0.07", "6476.15", "0.10", "9999999999999.99", "62105.20", None, "0.00"]
DAYS = [datetime.date(1994, 1, 1), None, datetime.date(9999, 12, 31), datetime.date(1970, 1, 1), datetime.date(1, 1, 1), None, datetime.date(2024, 2, 29), datetime.date(1969, 12, 31), datetime.date(1995, 6, 17)]


def decimals(values: list[str | None], dtype: pa.DataType) -> pa.Array:
    return pa.array([None if v is None else decimal.Decimal(v) for v in values], dtype)


def nearest(values: list[str | None]) -> list[float]:
    """What ``float(Decimal)`` gives: the double nearest each value (nulls as NaN)."""
    return [np.nan if v is None else float(decimal.Decimal(v)) for v in values]


def microseconds(days: list[datetime.date | None]) -> pd.Series:
    return pd.Series([pd.NaT if d is None else pd.Timestamp(datetime.datetime(d.year, d.month, d.day)) for d in days], dtype="datetime64[us]")


@pytest.fixture
def table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(len(PRICES)), pa.int64()),
            "price": decimals(PRICES, pa.decimal128(15, 2)),
            "rate": decimals(["0.05", "0.5", None, "1", "0", "0.99999", "12.3", "-4", "7"], pa.decimal128(18, 5)),
            "wide": decimals(["1.1", None, "12345678901234567890.123", "-0.000000001", "3", "2.5", "0.1", "1e-9", "7"], pa.decimal128(38, 10)),
            "huge": decimals(["0.1", "2.675", None, "-1", "3", "4", "5", "6", "7"], pa.decimal256(50, 4)),
            "day": pa.array(DAYS, pa.date32()),
            "stamp": pa.array([datetime.date(2020, 1, i + 1) for i in range(len(PRICES))], pa.date64()),
            "note": pa.array([f"n{i}" for i in range(len(PRICES))]),
        }
    )


@pytest.fixture
def converted_by_pandas(monkeypatch: pytest.MonkeyPatch) -> list[pd.Series]:
    """The dtypes of every frame dask's engine hands on from ``to_pandas``, before any cast."""
    seen: list[pd.Series] = []
    to_pandas = ArrowDatasetEngine._arrow_table_to_pandas.__func__

    def recording(cls: Any, *args: Any, **kwargs: Any) -> pd.DataFrame:
        frame = to_pandas(cls, *args, **kwargs)
        seen.append(frame.dtypes)
        return frame

    monkeypatch.setattr(ArrowDatasetEngine, "_arrow_table_to_pandas", classmethod(recording))
    return seen


def read(path: Path, **source: Any) -> Any:
    with backend_config("pandas"):
        return read_source(SourceSpec.model_validate({"format": "parquet", "path": str(path), **source}))


def test_decimals_and_dates_arrive_plain_with_their_values(tmp_path: Path, table: pa.Table, converted_by_pandas: list[pd.Series]) -> None:
    for part in range(3):  # three partitions, one of them starting mid-table
        pq.write_table(table.slice(part * 3, 3), tmp_path / f"part-{part}.parquet")
    frame = read(tmp_path)
    out = frame.compute().sort_values("id").reset_index(drop=True)
    expected = {"price": "float64", "rate": "float64", "wide": "float64", "huge": "float64", "day": "datetime64[us]", "stamp": "datetime64[us]"}
    assert {name: str(dtype) for name, dtype in out.dtypes.items() if name in expected} == expected
    assert dict(frame.dtypes) == dict(out.dtypes)  # dask's metadata says what the partitions hold
    for name in ("price", "rate", "wide", "huge"):
        values = [None if v is None else str(v) for v in table.column(name).to_pylist()]
        np.testing.assert_array_equal(out[name].to_numpy(), np.array(nearest(values)), err_msg=name)  # exact, not approximately
    pd.testing.assert_series_equal(out.day, microseconds(DAYS), check_names=False)
    pd.testing.assert_series_equal(out.stamp, microseconds(table.column("stamp").to_pylist()), check_names=False)
    assert out.price.isna().tolist() == [v is None for v in PRICES]
    # Nothing came out of to_pandas as Python objects or pandas' Arrow decimals and dates.
    assert len(converted_by_pandas) >= 4  # the metadata (an empty table) and each partition
    for dtypes in converted_by_pandas:
        assert {name: str(dtypes[name]) for name in expected} == expected


def test_hive_partition_columns_stay_plain(tmp_path: Path, table: pa.Table) -> None:
    for year in (2023, 2024):
        for region in ("east", "west"):
            folder = tmp_path / f"year={year}" / f"region={region}"
            folder.mkdir(parents=True)
            pq.write_table(table, folder / "part.parquet")
    out = read(tmp_path).compute()
    assert pd.api.types.is_integer_dtype(out.year.dtype)  # the type pyarrow infers from the folder names (int32)
    assert pd.api.types.is_string_dtype(out.region.dtype) and not isinstance(out.region.dtype, pd.CategoricalDtype)
    assert sorted(set(zip(out.year, out.region))) == [(2023, "east"), (2023, "west"), (2024, "east"), (2024, "west")]
    assert out.price.dtype == np.float64 and out.day.dtype == "datetime64[us]"


def test_column_subset_reads_plain(tmp_path: Path, table: pa.Table, converted_by_pandas: list[pd.Series]) -> None:
    pq.write_table(table, tmp_path / "part.parquet")
    out = read(tmp_path, columns=["day", "price"]).compute()
    assert list(out.columns) == ["day", "price"]
    assert [str(d) for d in out.dtypes] == ["datetime64[us]", "float64"]
    assert all(set(dtypes.index) <= {"day", "price"} for dtypes in converted_by_pandas[1:])  # the partitions read two columns


def test_a_file_pandas_wrote_with_decimal_objects(tmp_path: Path) -> None:
    # pandas' own metadata in the file says "decimal"/"date" columns of Python objects.
    frame = pd.DataFrame(
        {"amount": [decimal.Decimal("32986.52"), None, decimal.Decimal("1.05")], "day": [datetime.date(2024, 1, 2), None, datetime.date(2024, 3, 4)]}
    )
    table = pa.Table.from_pandas(frame, schema=pa.schema([("amount", pa.decimal128(10, 2)), ("day", pa.date32())]), preserve_index=False)
    pq.write_table(table, tmp_path / "part.parquet")
    out = read(tmp_path).compute()
    assert out.amount.dtype == np.float64 and out.day.dtype == "datetime64[us]"
    np.testing.assert_array_equal(out.amount.to_numpy(), np.array([32986.52, np.nan, 1.05]))
    assert out.day.tolist()[::2] == [pd.Timestamp("2024-01-02"), pd.Timestamp("2024-03-04")] and out.day.isna().tolist() == [False, True, False]


@pytest.mark.parametrize("dtype", [pa.decimal128(15, 2), pa.decimal128(9, 0), pa.decimal128(38, 2), pa.decimal256(40, 2)])
def test_decimal_to_float64_on_sliced_arrays_with_nulls(dtype: pa.DataType) -> None:
    rng = np.random.default_rng(0)
    digits = min(dtype.precision, 15)
    values = [None if i % 7 == 3 else str(decimal.Decimal(int(rng.integers(-(10**digits) + 1, 10**digits))).scaleb(-dtype.scale)) for i in range(2000)]
    array = decimals(values, dtype)
    for start, length in ((0, 2000), (1, 1000), (333, 77), (1999, 1), (5, 0)):
        got = _decimal_to_float64(array.slice(start, length))
        assert got.type == pa.float64() and got.null_count == sum(v is None for v in values[start : start + length])
        np.testing.assert_array_equal(got.to_numpy(zero_copy_only=False), np.array(nearest(values[start : start + length]), dtype="float64"))


def test_plain_arrow_table_leaves_other_columns_alone(table: pa.Table) -> None:
    plain = plain_arrow_table(table)
    assert plain.schema.field("price").type == pa.float64() and plain.schema.field("day").type == pa.timestamp("us")
    for name in ("id", "note"):
        assert plain.column(name).equals(table.column(name))
    empty = plain_arrow_table(table.schema.empty_table())
    assert empty.num_rows == 0 and empty.schema.field("huge").type == pa.float64()


@pytest.mark.parametrize(("quoted", "blocks"), [(False, 3), (True, 1)], ids=["no quote: split", "a quote in its head: whole"])
def test_a_csv_file_is_split_into_blocks_unless_its_head_holds_a_quote(tmp_path: Path, quoted: bool, blocks: int) -> None:
    """Blocks start at line breaks; one inside a quoted field would start a block mid-field (docs/spec.md, "CSV")."""
    rows = "".join(f'{i},"a, b {i}"\n' if quoted and i == 3 else f"{i},x{i}\n" for i in range(2000))
    (tmp_path / "f.csv").write_text("id,s\n" + rows)
    size = (tmp_path / "f.csv").stat().st_size
    with backend_config("pandas"):
        frame = read_source(SourceSpec(format="csv", path=str(tmp_path / "f.csv"), blocksize=str(size // 4 + 1)))
        assert frame.npartitions == blocks
        assert len(frame.compute()) == 2000
