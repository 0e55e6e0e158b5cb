"""Domain errors. Each carries a stable ``code``, a human ``message`` and, where
known, the spec ``field`` it is about; the service maps them to HTTP in one place."""

from __future__ import annotations


class SpillwayError(Exception):
    """Base of every error Spillway reports to a user."""

    code = "spillway_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, str]:
        body = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class SpecError(SpillwayError):
    """The job spec is well-formed JSON but cannot run as written."""

    code = "invalid_spec"


class ExpressionError(SpecError):
    """An expression uses syntax or names outside the whitelisted language."""

    code = "invalid_expression"


class TypeMismatch(SpecError):
    """Values of kinds that cannot meet: a string compared with a number, a sum of dates,
    join keys of different kinds. The message names the parts and both kinds."""

    code = "type_mismatch"


class UnknownColumn(SpecError):
    """A step refers to a column its input does not have."""

    code = "unknown_column"


class SourceNotFound(SpecError):
    """A source path or glob matches no file."""

    code = "source_not_found"


class SinkExists(SpillwayError):
    """The sink path already holds data; Spillway never overwrites output."""

    code = "sink_exists"


class JobNotFound(SpillwayError):
    """No job has the given id."""

    code = "job_not_found"


class InvalidTransition(SpillwayError):
    """A state change that the job lifecycle forbids (e.g. cancelling a finished job)."""

    code = "invalid_transition"


class ClusterConfigError(SpillwayError):
    """Cluster settings that cannot work; the message says how to fix them."""

    code = "invalid_cluster_config"


class IdempotencyConflict(SpillwayError):
    """An Idempotency-Key sent again with a different spec."""

    code = "idempotency_conflict"


class QueueFull(SpillwayError):
    """Too many jobs are waiting; the client should retry later."""

    code = "queue_full"


class IntegerOverflow(SpillwayError):
    """An integer result outside int64 at run time: the expression's field and part are named, nothing is committed."""

    code = "integer_overflow"


class DivisionByZero(SpillwayError):
    """``divide(x, y)`` met a zero divisor at run time: the expressions using it are named, nothing is committed."""

    code = "division_by_zero"


class DatetimeOutOfRange(SpillwayError):
    """``cast(x, 'datetime64[ns]')`` met a date-time nanoseconds cannot hold (before 1677 or after 2262, such as the
    sentinel 9999-12-31), at run time: the expressions casting are named, nothing is committed."""

    code = "datetime_out_of_range"


class TextNotParsed(SpillwayError):
    """``strptime`` met a text its format does not read, at run time: the expressions using it are named, nothing is committed."""

    code = "text_not_parsed"


class ReadTypeMismatch(SpillwayError):
    """A CSV or JSON-lines value its column's read type cannot hold, met while a job runs (``abc`` in an int64
    column past the rows its type was inferred from): the column, the file and the fix are named, nothing is committed."""

    code = "read_type_mismatch"


class UnreadableSource(SpecError):
    """A source file that cannot be read as its format (a row with more fields than its header, a malformed JSON line,
    a CSV file whose header is not its source's first file's): the file is named; at submit a 422, later a failed job."""

    code = "unreadable_source"


class CsvScanMiscount(UnreadableSource):
    """A CSV file Polars' scan cannot split into rows, while Polars' whole-file reader and the Dask engine read it: a quote
    character inside an unquoted field (``ab"c``) or one left open in a column the job does not read. Polars' parallel
    scan counts rows by the quotes and then finds one more (``CSV malformed: expected 1100 rows, actual 1101 rows``).
    Under ``engine: auto`` such a job runs on the Dask engine, with the reason recorded; under ``engine: polars`` it fails,
    naming the file (:attr:`path`)."""

    path: str = ""
    counts: str = ""  # Polars' words: "CSV malformed: expected 1100 rows, actual 1101 rows"


class SqlFailed(SpillwayError):
    """A SQL source's query failed while running (a cast a value cannot take, a scalar subquery of several rows): the
    source is named with the first line of Polars' reason, nothing is committed."""

    code = "sql_failed"


class TooManyPartitions(SpecError):
    """A job's graph is over the configured partition limit (at submit, a 422 naming the blocksize)."""

    code = "too_many_partitions"


class GpuUnsupported(SpecError):
    """cudf-polars cannot run this query on the GPU (and the job asked for the Polars engine): a 422."""

    code = "gpu_unsupported"
