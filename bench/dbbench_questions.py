"""db-benchmark's 10 groupby and 5 join questions, each written four ways.

For every question: a Spillway JobSpec (what a user would submit), DuckDB SQL, a Polars
lazy query and idiomatic ``dask.dataframe`` code (the same code on pandas and cuDF). The
questions and their output column names follow db-benchmark's scripts
(``duckdb/groupby-duckdb.R``, ``polars/groupby-polars.py``, ``polars/join-polars.py``);
right-side join columns whose names clash get ``_right`` in every engine, so answers can
be compared column by column.

Polars and Dask are imported by the worker process, never here: their builders take the
module (``pl``) or nothing and return callables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Workload = Literal["groupby", "join"]
WORKLOADS: tuple[Workload, ...] = ("groupby", "join")


@dataclass(frozen=True)
class Question:
    """One benchmark question: what it reads and its Spillway and SQL forms."""

    workload: Workload
    name: str
    title: str
    steps: list[dict[str, Any]]
    sql: str
    columns: list[str] | None = None  # columns of x it reads (groupby); None: all
    right: str | None = None  # the join's right table
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.workload}.{self.name}"


def _agg(func: str, column: str | None = None, expr: str | None = None) -> dict[str, str]:
    return {"func": func, **({"column": column} if column else {}), **({"expr": expr} if expr else {})}


def _groupby(by: list[str], **aggs: dict[str, str]) -> dict[str, Any]:
    return {"op": "groupby", "by": by, "aggs": aggs}


# r2 = corr(v1, v2)^2 from per-group sums: (n·Σxy − Σx·Σy)² / ((n·Σx² − (Σx)²)(n·Σy² − (Σy)²)).
_R2 = "(n * sxy - sx * sy) ** 2 / ((n * sxx - sx ** 2) * (n * syy - sy ** 2))"
_ID6 = ["id1", "id2", "id3", "id4", "id5", "id6"]

GROUPBY = [
    Question("groupby", "q1", "sum v1 by id1", [_groupby(["id1"], v1=_agg("sum", "v1"))],
             "SELECT id1, sum(v1) AS v1 FROM x GROUP BY id1", ["id1", "v1"]),
    Question("groupby", "q2", "sum v1 by id1:id2", [_groupby(["id1", "id2"], v1=_agg("sum", "v1"))],
             "SELECT id1, id2, sum(v1) AS v1 FROM x GROUP BY id1, id2", ["id1", "id2", "v1"]),
    Question("groupby", "q3", "sum v1 mean v3 by id3", [_groupby(["id3"], v1=_agg("sum", "v1"), v3=_agg("mean", "v3"))],
             "SELECT id3, sum(v1) AS v1, avg(v3) AS v3 FROM x GROUP BY id3", ["id3", "v1", "v3"]),
    Question("groupby", "q4", "mean v1:v3 by id4",
             [_groupby(["id4"], v1=_agg("mean", "v1"), v2=_agg("mean", "v2"), v3=_agg("mean", "v3"))],
             "SELECT id4, avg(v1) AS v1, avg(v2) AS v2, avg(v3) AS v3 FROM x GROUP BY id4", ["id4", "v1", "v2", "v3"]),
    Question("groupby", "q5", "sum v1:v3 by id6",
             [_groupby(["id6"], v1=_agg("sum", "v1"), v2=_agg("sum", "v2"), v3=_agg("sum", "v3"))],
             "SELECT id6, sum(v1) AS v1, sum(v2) AS v2, sum(v3) AS v3 FROM x GROUP BY id6", ["id6", "v1", "v2", "v3"]),
    Question("groupby", "q6", "median v3 sd v3 by id4 id5",
             [_groupby(["id4", "id5"], median_v3=_agg("median", "v3"), sd_v3=_agg("std", "v3"))],
             "SELECT id4, id5, median(v3) AS median_v3, stddev(v3) AS sd_v3 FROM x GROUP BY id4, id5", ["id4", "id5", "v3"]),
    Question("groupby", "q7", "max v1 - min v2 by id3",
             [_groupby(["id3"], max_v1=_agg("max", "v1"), min_v2=_agg("min", "v2")),
              {"op": "assign", "column": "range_v1_v2", "expr": "max_v1 - min_v2"},
              {"op": "select", "columns": ["id3", "range_v1_v2"]}],
             "SELECT id3, max(v1) - min(v2) AS range_v1_v2 FROM x GROUP BY id3", ["id3", "v1", "v2"]),
    Question("groupby", "q8", "largest two v3 by id6",
             [{"op": "top_k", "by": ["id6"], "order": [{"column": "v3", "descending": True}], "k": 2},
              {"op": "rename", "columns": {"v3": "largest2_v3"}}],
             "SELECT id6, largest2_v3 FROM (SELECT id6, v3 AS largest2_v3, row_number() OVER (PARTITION BY id6 ORDER BY v3 DESC) AS rank"
             " FROM x WHERE v3 IS NOT NULL) WHERE rank <= 2", ["id6", "v3"],
             notes=["Spillway: top_k. Dask: a shuffle on id6, then the two largest per group in each partition "
                    "(db-benchmark's dask script used groupby().apply(nlargest), far slower)."]),
    Question("groupby", "q9", "regression v1 v2 by id2 id4",
             [_groupby(["id2", "id4"], n=_agg("size"), sx=_agg("sum", "v1"), sy=_agg("sum", "v2"),
                       sxx=_agg("sum", expr="v1 * v1"), syy=_agg("sum", expr="v2 * v2"), sxy=_agg("sum", expr="v1 * v2")),
              {"op": "assign", "column": "r2", "expr": _R2},
              {"op": "select", "columns": ["id2", "id4", "r2"]}],
             "SELECT id2, id4, pow(corr(v1, v2), 2) AS r2 FROM x GROUP BY id2, id4", ["id2", "id4", "v1", "v2"],
             notes=["Spillway has no corr aggregation: r2 comes from per-group sums (aggregations over expressions) and one "
                    "assign. Dask's groupby().corr() fails on dask 2026.8 with pandas 3, so the Dask code uses the same sums."]),
    Question("groupby", "q10", "sum v3 count by id1:id6",
             [_groupby(_ID6, v3=_agg("sum", "v3"), count=_agg("count", "v1"))],
             "SELECT id1, id2, id3, id4, id5, id6, sum(v3) AS v3, count(v1) AS count FROM x GROUP BY id1, id2, id3, id4, id5, id6",
             [*_ID6, "v1", "v3"]),
]


def _join(name: str, title: str, right: str, on: str, how: str, clashing: list[str]) -> Question:
    kind = "LEFT JOIN" if how == "left" else "JOIN"
    renamed = ", ".join(f"{right}.{column} AS {column}_right" for column in clashing)
    sql = f"SELECT x.*, {renamed}, {right}.v2 FROM x {kind} {right} ON x.{on} = {right}.{on}"
    return Question("join", name, title, [{"op": "join", "right": right, "on": [on], "how": how}], sql, right=right)


JOIN = [
    _join("q1", "small inner on int", "small", "id1", "inner", ["id4"]),
    _join("q2", "medium inner on int", "medium", "id2", "inner", ["id1", "id4", "id5"]),
    _join("q3", "medium outer on int", "medium", "id2", "left", ["id1", "id4", "id5"]),
    _join("q4", "medium inner on factor", "medium", "id5", "inner", ["id1", "id2", "id4"]),
    _join("q5", "big inner on int", "big", "id3", "inner", ["id1", "id2", "id4", "id5", "id6"]),
]

QUESTIONS: dict[str, Question] = {q.key: q for q in [*GROUPBY, *JOIN]}


def select_questions(text: str) -> list[Question]:
    """``all``, a workload (``groupby``, ``join``) or keys such as ``groupby.q1``, comma-separated.

    Raises
    ------
    ValueError
        Naming the unknown item and what is accepted.
    """
    picked: list[Question] = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        if item == "all":
            found = list(QUESTIONS.values())
        elif item in WORKLOADS:
            found = [q for q in QUESTIONS.values() if q.workload == item]
        elif item in QUESTIONS:
            found = [QUESTIONS[item]]
        else:
            raise ValueError(f"unknown question '{item}': use all, groupby, join or keys like {', '.join(list(QUESTIONS)[:2])}, ...")
        picked += [q for q in found if q not in picked]
    return picked


def spillway_spec(question: Question, tables: dict[str, Path], sink: Path) -> dict[str, Any]:
    """The JobSpec (as JSON) a user would submit for ``question``."""
    def source(table: str, columns: list[str] | None = None) -> dict[str, Any]:
        return {"format": "parquet", "path": str(tables[table]), **({"columns": columns} if columns else {})}

    spec: dict[str, Any] = {"name": f"dbbench_{question.workload}_{question.name}", "steps": question.steps, "sink": {"path": str(sink)}}
    if question.right is None:
        spec["source"] = source("x", question.columns)
    else:
        spec["sources"] = {"x": source("x"), question.right: source(question.right)}
        spec["source"] = "x"
    return spec


def polars_queries(pl: Any) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Question key → a function of the scanned tables (``pl.LazyFrame``) giving the answer, lazily."""
    sum_, mean = pl.sum, pl.mean
    queries: dict[str, Callable[[dict[str, Any]], Any]] = {
        "groupby.q1": lambda t: t["x"].group_by("id1").agg(sum_("v1").alias("v1")),
        "groupby.q2": lambda t: t["x"].group_by("id1", "id2").agg(sum_("v1").alias("v1")),
        "groupby.q3": lambda t: t["x"].group_by("id3").agg(sum_("v1").alias("v1"), mean("v3").alias("v3")),
        "groupby.q4": lambda t: t["x"].group_by("id4").agg(mean("v1"), mean("v2"), mean("v3")),
        "groupby.q5": lambda t: t["x"].group_by("id6").agg(sum_("v1"), sum_("v2"), sum_("v3")),
        "groupby.q6": lambda t: t["x"].group_by("id4", "id5").agg(
            pl.median("v3").alias("median_v3"), pl.std("v3").alias("sd_v3")),
        "groupby.q7": lambda t: t["x"].group_by("id3").agg((pl.max("v1") - pl.min("v2")).alias("range_v1_v2")),
        "groupby.q8": lambda t: t["x"].drop_nulls("v3").group_by("id6")
        .agg(pl.col("v3").top_k(2).alias("largest2_v3")).explode("largest2_v3"),
        "groupby.q9": lambda t: t["x"].group_by("id2", "id4").agg((pl.corr("v1", "v2") ** 2).alias("r2")),
        "groupby.q10": lambda t: t["x"].group_by(*_ID6).agg(sum_("v3").alias("v3"), pl.col("v1").count().alias("count")),
    }
    for question in JOIN:
        on, how, right = question.steps[0]["on"][0], question.steps[0]["how"], question.right
        queries[question.key] = lambda t, on=on, how=how, right=right: t["x"].join(t[right], on=on, how=how)
    return queries


def _dask_top2(frame: Any) -> Any:
    return frame.sort_values("v3", ascending=False).groupby("id6", sort=False).head(2)


def _dask_r2(x: Any) -> Any:
    # dask's groupby().corr() fails on dask 2026.7 with pandas 3 ("Expected iterable of
    # tuples of (name, dtype)"), so the correlation comes from per-group sums.
    v1, v2 = x.v1.astype("float64"), x.v2.astype("float64")
    x = x.assign(v1=v1, v2=v2, v1v1=v1 * v1, v2v2=v2 * v2, v1v2=v1 * v2)
    s = x.groupby(["id2", "id4"]).agg({"v1": ["count", "sum"], "v2": "sum", "v1v1": "sum", "v2v2": "sum", "v1v2": "sum"})
    s.columns = ["n", "sx", "sy", "sxx", "syy", "sxy"]
    r2 = (s.n * s.sxy - s.sx * s.sy) ** 2 / ((s.n * s.sxx - s.sx**2) * (s.n * s.syy - s.sy**2))
    return r2.to_frame("r2").reset_index()


def _dask_q6(x: Any) -> Any:
    out = x.groupby(["id4", "id5"]).agg({"v3": ["median", "std"]})
    out.columns = ["median_v3", "sd_v3"]
    return out.reset_index()


def _dask_q7(x: Any) -> Any:
    out = x.groupby("id3").agg({"v1": "max", "v2": "min"})
    return out.assign(range_v1_v2=out.v1 - out.v2)[["range_v1_v2"]].reset_index()


def dask_queries() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Question key → a function of the read tables (``dask.dataframe``) giving the answer, lazily."""
    queries: dict[str, Callable[[dict[str, Any]], Any]] = {
        "groupby.q1": lambda t: t["x"].groupby("id1").agg({"v1": "sum"}).reset_index(),
        "groupby.q2": lambda t: t["x"].groupby(["id1", "id2"]).agg({"v1": "sum"}).reset_index(),
        "groupby.q3": lambda t: t["x"].groupby("id3").agg({"v1": "sum", "v3": "mean"}).reset_index(),
        "groupby.q4": lambda t: t["x"].groupby("id4").agg({"v1": "mean", "v2": "mean", "v3": "mean"}).reset_index(),
        "groupby.q5": lambda t: t["x"].groupby("id6").agg({"v1": "sum", "v2": "sum", "v3": "sum"}).reset_index(),
        "groupby.q6": lambda t: _dask_q6(t["x"]),
        "groupby.q7": lambda t: _dask_q7(t["x"]),
        # A shuffle on the key, then the two largest per group within each partition.
        "groupby.q8": lambda t: t["x"].shuffle("id6").map_partitions(_dask_top2).rename(columns={"v3": "largest2_v3"}),
        "groupby.q9": lambda t: _dask_r2(t["x"]),
        "groupby.q10": lambda t: t["x"].groupby(_ID6).agg({"v3": "sum", "v1": "count"})
        .rename(columns={"v1": "count"}).reset_index(),
    }
    for question in JOIN:
        on, how, right = question.steps[0]["on"][0], question.steps[0]["how"], question.right
        queries[question.key] = lambda t, on=on, how=how, right=right: t["x"].merge(
            t[right], on=on, how=how, suffixes=("", "_right"))
    return queries
