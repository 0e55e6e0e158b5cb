"""Answer checks and markdown tables for bench/dbbench.py.

An engine's answer is its result's row count and, per numeric column, the sum (as float64)
and the number of nulls (NaN counted as null), read back from the parquet it wrote. Every
engine is compared with a reference (DuckDB when it answered, else the first engine that
did); a difference is reported as MISMATCH in the table, never dropped.
"""

from __future__ import annotations

import math
from typing import Any

from bench.dbbench_questions import Question

Entry = dict[str, Any]  # one engine on one question: runs, check, error / skipped / killed
#: A shown time is marked when other processes used this share of the machine's CPU meanwhile.
CONTENDED = 0.10


def compare(reference: dict[str, Any], other: dict[str, Any], rel_tol: float) -> list[str]:
    """How ``other``'s checksum differs from ``reference``'s; empty when they agree."""
    problems = []
    if other["rows"] != reference["rows"]:
        problems.append(f"rows {other['rows']} vs {reference['rows']}")
    ref_sums, sums = reference["sums"], other["sums"]
    for column in sorted(set(ref_sums) | set(sums)):
        if column not in sums or column not in ref_sums:
            problems.append(f"numeric column '{column}' {'missing' if column not in sums else 'extra'}")
            continue
        mine, theirs = sums[column], ref_sums[column]
        if mine["nulls"] != theirs["nulls"]:
            problems.append(f"{column}: {mine['nulls']} nulls vs {theirs['nulls']}")
        if not math.isclose(mine["sum"], theirs["sum"], rel_tol=rel_tol, abs_tol=1e-9):
            problems.append(f"{column}: sum {mine['sum']!r} vs {theirs['sum']!r}")
    return problems


def check_answers(entries: dict[str, Entry], rel_tol: float) -> dict[str, Any]:
    """The verdict on one question: agree, MISMATCH (with what differs), or why there is none."""
    answers = {engine: entry["check"] for engine, entry in entries.items() if "check" in entry}
    if not answers:
        return {"status": "no answer"}
    reference = "duckdb" if "duckdb" in answers else next(iter(answers))
    problems = {
        engine: found
        for engine, check in answers.items()
        if engine != reference and (found := compare(answers[reference], check, rel_tol))
    }
    status = "MISMATCH" if problems else ("agree" if len(answers) > 1 else "one answer")
    return {"status": status, "reference": reference, "rows": answers[reference]["rows"], "compared": list(answers),
            "problems": problems}


def warm_and_first(entry: Entry, field: str = "seconds") -> tuple[float | None, float | None]:
    """(best of the runs after the first, or the first when there is one run; the first run)."""
    times = [run[field] for run in entry.get("runs", []) if run.get(field) is not None]
    if not times:
        return None, None
    return (min(times[1:]) if len(times) > 1 else times[0]), times[0]


def _contended(entry: Entry) -> bool:
    """Whether other processes used ``CONTENDED`` or more of the CPU during the run shown as warm."""
    runs = entry.get("runs", [])
    shown = min(runs[1:], key=lambda run: run["seconds"]) if len(runs) > 1 else runs[0]
    return shown.get("others_cpu_share", 0.0) >= CONTENDED


def _cell(entry: Entry | None, mismatch: bool, field: str = "seconds") -> str:
    if entry is None:
        return "–"
    warm, first = warm_and_first(entry, field)
    if warm is None:
        for outcome in ("killed", "error", "skipped"):
            if outcome in entry:
                return outcome
        return "–"
    text = f"{warm:.2f} ({first:.2f})" if len(entry["runs"]) > 1 else f"{first:.2f}"
    if _contended(entry):
        text += " ⚠"
    if any(outcome in entry for outcome in ("killed", "error", "skipped")):
        text += " †"
    return f"✗ {text}" if mismatch else text


def _columns(engines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(header, engine, timing field) per table column; Spillway has run and submit→end."""
    columns = []
    for engine in engines:
        if engine["kind"] == "spillway":
            columns += [(f"{engine['name']} run", engine["name"], "seconds"),
                        (f"{engine['name']} submit→end", engine["name"], "submit_to_end_s")]
        else:
            columns.append((engine["name"], engine["name"], "seconds"))
    return columns


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def workload_tables(workload: str, questions: list[Question], engines: list[dict[str, Any]], results: dict[str, Any]) -> str:
    """Seconds per question and engine, then each engine's time relative to each Spillway variant."""
    picked = [q for q in questions if q.workload == workload and q.key in results]
    if not picked:
        return ""
    columns = _columns(engines)
    lines = [f"#### {workload}: seconds, warm (first run); ✗ answer differs; † a run failed or was skipped; "
             f"⚠ other processes used ≥ {CONTENDED:.0%} of the CPU meanwhile", "",
             _row(["question", *[c[0] for c in columns], "rows", "answers"]), _row(["---"] * (len(columns) + 3))]
    notes = []
    for question in picked:
        result = results[question.key]
        check = result["check"]
        bad = set(check.get("problems", {}))
        cells = [_cell(result["engines"].get(name), name in bad, field) for _, name, field in columns]
        verdict = check["status"]
        if bad:
            verdict = "**MISMATCH** " + "; ".join(f"{e}: {', '.join(p)}" for e, p in check["problems"].items())
        lines.append(_row([f"{question.name} {question.title}", *cells, str(check.get("rows", "–")), verdict]))
        for name, entry in result["engines"].items():
            for outcome in ("killed", "error", "skipped"):
                if outcome in entry:
                    notes.append(f"- {question.key} {name}: {outcome}: {str(entry[outcome]).splitlines()[0][:300]}")
    lines += ["", *notes] if notes else []
    for base in (e for e in engines if e["kind"] == "spillway"):
        lines += ["", *_ratio_table(workload, picked, engines, results, base["name"])]
    return "\n".join(lines) + "\n"


def _ratio_table(workload: str, questions: list[Question], engines: list[dict[str, Any]], results: dict[str, Any], base: str) -> list[str]:
    others = [e["name"] for e in engines if e["name"] != base]
    lines = [f"#### {workload}: {base} run time ÷ engine time, warm runs (above 1: the engine is faster than {base})", "",
             _row(["question", *others]), _row(["---"] * (len(others) + 1))]
    logs: dict[str, list[float]] = {name: [] for name in others}
    for question in questions:
        found = results[question.key]["engines"]
        base_time = warm_and_first(found.get(base, {}))[0]
        cells = []
        for name in others:
            time = warm_and_first(found.get(name, {}))[0]
            if base_time is None or time is None or time <= 0:
                cells.append("–")
                continue
            ratio = base_time / time
            logs[name].append(math.log(ratio))
            cells.append(f"{ratio:.3g}×")
        lines.append(_row([f"{question.name}", *cells]))
    geo = [f"{math.exp(sum(v) / len(v)):.3g}× ({len(v)})" if v else "–" for v in logs.values()]
    lines.append(_row(["geometric mean (questions)", *geo]))
    return lines
