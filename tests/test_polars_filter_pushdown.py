"""A source's first filters run before its read casts on the CPU engine (jobs.polars_frame), with the same rows.

Polars pushes a filter into the parquet scan, where rows it drops are never decoded, but not
through the casts that read decimals as float64 and dates as datetimes; so the CPU engine filters
on the files' own types, casting each column inside the predicate as the read does.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from spillway.jobs.polars_frame import build_lazyframe
from spillway.jobs.spec import JobSpec
from spillway.jobs.validate import plan_spec


@pytest.fixture()
def lines(tmp_path: Path) -> Path:
    table = pa.table({
        "price": pa.array([Decimal("10.05"), Decimal("0.07"), None, Decimal("24.00"), Decimal("9999999999999.99")], pa.decimal128(15, 2)),
        "shipped": pa.array([date(1994, 1, 1), date(1994, 12, 31), date(1995, 1, 1), None, date(1993, 6, 30)], pa.date32()),
        "qty": pa.array([1, 24, 3, None, 2**40], pa.int64()),
    })
    pq.write_table(table, tmp_path / "lines.parquet")
    return tmp_path / "lines.parquet"


def _spec(source: Path, *filters: str) -> JobSpec:
    steps = [{"op": "filter", "expr": text} for text in filters]
    return JobSpec.model_validate({"name": "t", "source": {"format": "parquet", "path": str(source)},
                                   "steps": [*steps, {"op": "assign", "column": "twice", "expr": "price * 2"}], "sink": {"path": "/tmp/unused"}})


FILTERS = [
    ("shipped >= date('1994-01-01') and shipped < date('1994-01-01') + interval(1, 'year')",),
    ("price > 0.07", "qty * 2 < 100"),
    ("not (price == 24)",),
    ("isnull(price) or isnull(shipped)",),
    ("cast(price, 'string') == '10.05'",),
    # A stored date against a datetime literal runs on the dates (jobs.date_bounds): every operator, either way round, a time of day.
    ("shipped > date('1994-01-01')", "date('1995-01-01') >= shipped"),
    ("shipped <= timestamp('1994-12-31 12:00:00') and shipped > timestamp('1993-06-30 00:00:01')",),
    ("timestamp('1994-01-01 00:00:00.000001') <= shipped",),
    ("between(shipped, timestamp('1994-01-01 06:00:00'), date('1995-01-01'))",),
    ("shipped == date('1994-12-31') or shipped != date('1994-01-01')",),
]


@pytest.mark.parametrize("filters", FILTERS, ids=[" then ".join(f) for f in FILTERS])
def test_filters_before_the_read_casts_keep_the_rows_and_types(lines: Path, filters: tuple[str, ...]) -> None:
    plan = plan_spec(_spec(lines, *filters))
    after, before = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    assert after.collect_schema() == before.collect_schema()
    assert_frame_equal(after.collect(), before.collect())


def test_the_filter_reaches_the_parquet_scan(lines: Path) -> None:
    plan = plan_spec(_spec(lines, "shipped >= date('1994-01-01')"))
    pushed = build_lazyframe(plan, filters_before_casts=True).explain()
    kept = build_lazyframe(plan).explain()
    assert "SELECTION" in pushed.split("Parquet SCAN")[1], pushed  # Polars shows a predicate it pushed into the scan so
    assert "SELECTION" not in kept.split("Parquet SCAN")[1], kept


def test_an_integer_overflow_in_a_pushed_filter_still_fails(lines: Path) -> None:
    plan = plan_spec(_spec(lines, "qty * 9000000 > 0"))  # 2**40 * 9e6 is outside int64
    with pytest.raises(Exception, match="spillway: integer overflow"):
        build_lazyframe(plan, filters_before_casts=True).collect()


def test_a_stored_date_is_compared_as_a_date(lines: Path) -> None:
    """No cast of the date column in the pushed predicate: Polars compares the stored dates (and can use the row groups' statistics)."""
    plan = plan_spec(_spec(lines, "shipped >= date('1994-01-01') and between(shipped, date('1990-01-01'), date('1994-06-30'))"))
    predicate = build_lazyframe(plan, filters_before_casts=True).explain().split("Parquet SCAN")[1]
    assert 'col("shipped") >= 1994-01-01' in predicate and 'col("shipped") <= 1994-06-30' in predicate, predicate
    assert 'col("shipped").strict_cast' not in predicate, predicate


def _joined(tmp_path: Path, lines: Path, *filters: str, how: str = "inner") -> JobSpec:
    orders = tmp_path / "orders.parquet"
    pq.write_table(pa.table({"qty": pa.array([1, 24, 3, 7], pa.int64()), "price": pa.array([1.0, 2.0, 3.0, 4.0]),
                             "placed": pa.array([date(1994, 1, 1), date(1995, 6, 1), None, date(1993, 1, 1)], pa.date32())}), orders)
    steps = [{"op": "join", "how": how, "right": "orders", "on": ["qty"]}, *({"op": "filter", "expr": text} for text in filters)]
    return JobSpec.model_validate({"name": "t", "sources": {"lines": {"format": "parquet", "path": str(lines)},
                                                            "orders": {"format": "parquet", "path": str(orders)}},
                                   "source": "lines", "steps": steps, "sink": {"path": "/tmp/unused"}})


@pytest.mark.parametrize(("filters", "pushed"), [
    (("placed < date('1995-01-01')",), True),  # only the right side's own column: into its scan
    (("placed < date('1995-01-01')", "price_right > 1"), True),  # the second reads a suffixed column: stays after the join
    (("shipped > date('1994-01-01')",), False),  # the left's
])
def test_a_filter_after_an_inner_join_on_the_right_sides_own_columns_reaches_its_scan(
        tmp_path: Path, lines: Path, filters: tuple[str, ...], pushed: bool) -> None:
    plan = plan_spec(_joined(tmp_path, lines, *filters))
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    right_scan = cpu.explain().split("orders.parquet")[1].split("END")[0]
    assert ("SELECTION" in right_scan) is pushed, cpu.explain()
    assert_frame_equal(cpu.collect(), kept.collect(), check_row_order=False)


def test_a_filter_after_a_left_join_stays_after_it(tmp_path: Path, lines: Path) -> None:
    # On a left join the right side's nulls of unmatched rows are filtered too: moving it would keep those rows.
    plan = plan_spec(_joined(tmp_path, lines, "isnull(placed)", how="left"))
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    assert "SELECTION" not in cpu.explain().split("orders.parquet")[1].split("END")[0]
    assert_frame_equal(cpu.collect(), kept.collect(), check_row_order=False)
    assert cpu.collect().height > 0


def test_a_derived_right_side_with_a_join_of_its_own_keeps_the_outer_filter_to_itself(tmp_path: Path, lines: Path) -> None:
    """The outer join's filters go to its own right side, not to a join inside that side's derivation."""
    orders, regions = tmp_path / "orders.parquet", tmp_path / "regions.parquet"
    pq.write_table(pa.table({"qty": pa.array([1, 24, 3], pa.int64()), "region": pa.array([1, 2, 1], pa.int64()),
                             "placed": pa.array([date(1994, 1, 1), date(1995, 6, 1), date(1993, 1, 1)], pa.date32())}), orders)
    pq.write_table(pa.table({"region": pa.array([1, 2], pa.int64()), "opened": pa.array([date(1990, 1, 1), date(1999, 1, 1)], pa.date32())}), regions)
    spec = JobSpec.model_validate({
        "name": "t",
        "sources": {"lines": {"format": "parquet", "path": str(lines)}, "regions": {"format": "parquet", "path": str(regions)},
                    "orders": {"format": "parquet", "path": str(orders)},
                    "placed_orders": {"from": "orders", "steps": [{"op": "join", "right": "regions", "on": ["region"]}]}},
        "source": "lines",
        "steps": [{"op": "join", "right": "placed_orders", "on": ["qty"]}, {"op": "filter", "expr": "placed > date('1993-06-01')"},
                  {"op": "filter", "expr": "opened < date('1995-01-01')"}],
        "sink": {"path": "/tmp/unused"}})
    plan = plan_spec(spec)
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    assert_frame_equal(cpu.collect(), kept.collect(), check_row_order=False)
    assert cpu.collect()["qty"].to_list() == [1]


def _two_sides(tmp_path: Path, lines: Path, steps: list[dict[str, object]], *, filtered_orders: bool) -> JobSpec:
    """``lines`` (a decimal price, a date, qty) with ``steps``, where ``orders`` has a date by the left's name ``shipped``."""
    orders = tmp_path / "orders.parquet"
    pq.write_table(pa.table({"qty": pa.array([1, 24, 3, 7, 24], pa.int64()),
                             "total": pa.array([Decimal("1.10"), Decimal("2.20"), None, Decimal("4.40"), Decimal("5.50")], pa.decimal128(15, 2)),
                             "shipped": pa.array([date(1994, 1, 1), date(1995, 6, 1), None, date(1993, 1, 1), date(1994, 12, 31)], pa.date32())}), orders)
    sources: dict[str, object] = {"lines": {"format": "parquet", "path": str(lines)}, "orders": {"format": "parquet", "path": str(orders)}}
    if filtered_orders:
        sources["all_orders"], sources["orders"] = sources["orders"], {"from": "all_orders", "steps": [{"op": "filter", "expr": "qty > 2"}]}
    return JobSpec.model_validate({"name": "t", "sources": sources, "source": "lines", "steps": steps, "sink": {"path": "/tmp/unused"}})


JOINS_BEFORE_CASTS = {
    # The left side filtered: the right's casts (its decimal, its date suffixed by the left's name) after the join.
    "right after, inner": (False, [{"op": "filter", "expr": "qty < 100"}, {"op": "join", "right": "orders", "on": ["qty"]}], ["total"]),
    "right after, left": (False, [{"op": "filter", "expr": "qty < 100"}, {"op": "join", "how": "left", "right": "orders", "on": ["qty"]}],
                          ["total", "shipped_right"]),
    # The right side filtered: the left's casts after the join.
    "left after, inner": (True, [{"op": "join", "right": "orders", "on": ["qty"]}], ["price"]),
    "left after, semi": (True, [{"op": "join", "how": "semi", "right": "orders", "on": ["qty"]}], ["price"]),
    # A key that is cast is cast before (compared as the language's datetimes), the rest after.
    "cast key": (True, [{"op": "join", "right": "orders", "left_on": ["shipped"], "right_on": ["shipped"]}], ["price"]),
    # Neither side filtered, or a left join's left side: the casts stay before (no rows are known to go).
    "none filtered": (False, [{"op": "join", "right": "orders", "on": ["qty"]}], []),
    "left join's left": (True, [{"op": "join", "how": "left", "right": "orders", "on": ["qty"]}], []),
}


@pytest.mark.parametrize("name", JOINS_BEFORE_CASTS)
def test_a_join_with_a_filtered_side_runs_before_the_other_sides_read_casts(tmp_path: Path, lines: Path, name: str) -> None:
    filtered_orders, steps, after = JOINS_BEFORE_CASTS[name]
    plan = plan_spec(_two_sides(tmp_path, lines, steps, filtered_orders=filtered_orders))
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    assert cpu.collect_schema() == kept.collect_schema()
    assert_frame_equal(cpu.collect(), kept.collect(), check_row_order=False)
    assert cpu.collect().height > 0
    # Polars prints a plan from its last operation down: a cast above the join is printed before it.
    shown = cpu.explain(optimized=False)
    join_at = shown.index("JOIN")
    for column in after:
        assert shown.find(f'col("{column}").strict_cast') < join_at, shown
    for column in {"price", "total"} - set(after):
        cast_at = shown.find(f'col("{column}").strict_cast')
        assert cast_at == -1 or cast_at > join_at, shown


def _facts_and_dims(tmp_path: Path, facts_rows: int, dims_rows: int, how: str = "inner") -> JobSpec:
    """``dims`` (a key and a date) joined with ``facts`` (a key and a decimal), the right side, each with the rows asked for."""
    dims, facts = tmp_path / "dims.parquet", tmp_path / "facts.parquet"
    pq.write_table(pa.table({"k": pa.array(range(dims_rows), pa.int64()),
                             "opened": pa.array([date(1994, 1, 1 + i % 28) for i in range(dims_rows)], pa.date32())}), dims)
    pq.write_table(pa.table({"k": pa.array([i % (dims_rows + 2) for i in range(facts_rows)], pa.int64()),
                             "amount": pa.array([Decimal(i) / 100 for i in range(facts_rows)], pa.decimal128(15, 2))}), facts)
    return JobSpec.model_validate({"name": "t", "sources": {"dims": {"format": "parquet", "path": str(dims)},
                                                            "facts": {"format": "parquet", "path": str(facts)}},
                                   "source": "dims", "steps": [{"op": "join", "how": how, "right": "facts", "on": ["k"]}],
                                   "sink": {"path": "/tmp/unused"}})


@pytest.mark.parametrize(("facts_rows", "dims_rows", "how", "after"), [
    (40, 10, "inner", True),  # the right side's scan holds more rows than the left's: its casts after the join (TPC-H q05)
    (40, 10, "left", True),
    (10, 40, "inner", False),  # fewer: before, where each of its rows is cast once
    (40, 40, "inner", False),
    (40, 10, "semi", False),  # only the left's columns come out
])
def test_a_larger_right_side_is_cast_after_the_join(tmp_path: Path, facts_rows: int, dims_rows: int, how: str, after: bool) -> None:
    plan = plan_spec(_facts_and_dims(tmp_path, facts_rows, dims_rows, how))
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    assert cpu.collect_schema() == kept.collect_schema()
    assert_frame_equal(cpu.collect(), kept.collect(), check_row_order=False)
    shown = cpu.explain(optimized=False)
    cast_at = shown.find('col("amount").strict_cast')
    assert (-1 < cast_at < shown.index("JOIN")) is after, shown


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_two_stored_dates_are_compared_as_dates(tmp_path: Path, op: str) -> None:
    """Neither date is cast in the pushed predicate (TPC-H q04's ``l_commitdate < l_receiptdate``); the same rows, nulls out."""
    path = tmp_path / "dates.parquet"
    days = [date(1994, 1, 1), date(1994, 1, 2), None, date(1995, 3, 1)]
    pq.write_table(pa.table({"a": pa.array(days, pa.date32()), "b": pa.array([days[1], days[1], days[0], None], pa.date32()),
                             "price": pa.array([Decimal("1.00")] * 4, pa.decimal128(15, 2))}), path)
    plan = plan_spec(_spec(path, f"a {op} b"))
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    predicate = cpu.explain().split("Parquet SCAN")[1]
    assert "strict_cast" not in predicate and 'col("a")' in predicate, predicate
    assert_frame_equal(cpu.collect(), kept.collect())
    assert cpu.collect().height == {"<": 1, "<=": 2, ">": 0, ">=": 1, "==": 1, "!=": 1}[op]


def test_two_stored_dates_in_a_conjunction_keep_their_casts(tmp_path: Path) -> None:
    """With a bound beside them (TPC-H q12), Polars' scan reads the bounded column first and the dates only for the rows
    it keeps, comparing their casts after the scan; compared as dates, the whole predicate went into the scan."""
    path = tmp_path / "dates.parquet"
    days = [date(1994, 1, 1), date(1994, 1, 2), None, date(1995, 3, 1)]
    pq.write_table(pa.table({"a": pa.array(days, pa.date32()), "b": pa.array([days[1], days[1], days[0], None], pa.date32()),
                             "price": pa.array([Decimal("1.00")] * 4, pa.decimal128(15, 2))}), path)
    plan = plan_spec(_spec(path, "a < b and price > 0.5"))
    cpu, kept = build_lazyframe(plan, filters_before_casts=True), build_lazyframe(plan)
    assert 'col("a").strict_cast' in cpu.explain()
    assert_frame_equal(cpu.collect(), kept.collect())
    assert cpu.collect().height == 1
