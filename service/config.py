"""One Settings object for the whole service, from ``SPILLWAY_*`` environment variables.

Nested settings use a double underscore: ``SPILLWAY_CLUSTER__N_WORKERS=4``,
``SPILLWAY_STORAGE__S3_ENDPOINT_URL=http://127.0.0.1:9000``.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from spillway.cluster.settings import ClusterSettings
from spillway.jobs.sandbox import url_problem
from spillway.jobs.spec import TIMEOUT_CEILING_S, limit_timeouts
from spillway.jobs.storage import StorageSettings
from spillway.jobs.storage import configure as configure_storage
from spillway.service.oidc_settings import OidcSettings


class Settings(BaseSettings):
    """Everything the service can be told. Built once at start and injected."""

    model_config = SettingsConfigDict(env_prefix="SPILLWAY_", env_nested_delimiter="__", extra="forbid")

    database_url: str = Field(
        default="sqlite:///var/spillway.db",
        description="SQLAlchemy URL of the job store: a SQLite file by default, or postgresql+psycopg://user@host/db.",
    )
    database_migrate: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Upgrade the database schema at start-up (Alembic, as `spillway db upgrade` does): 'auto' does it for "
        "SQLite only; with PostgreSQL run `spillway db upgrade` once per release, before starting the replicas. With it "
        "off, a database that is not at the newest revision stops the service at start-up, saying so.",
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port the HTTP server binds.")
    public_url: str | None = Field(default=None, description="Base URL used in links, when clients reach the service at another address.")
    max_concurrent_jobs: int = Field(default=2, ge=1, le=1024, description="Jobs running at once; the rest queue in submission order.")
    progress_interval_s: float = Field(default=0.5, gt=0, le=1.0, description="Seconds between progress writes to the store while a job runs.")
    cancel_timeout_s: float = Field(default=30.0, gt=0, description="How long POST /jobs/{id}/cancel waits for the job to stop.")
    hung_worker_s: float = Field(
        default=60.0, ge=0,
        description="A worker that sends no heartbeat for this many seconds while jobs run is taken to be hung and restarted; "
        "its tasks run again on the other workers (0: never). Heartbeats come every 0.5-5 s.",
    )
    multi_gpu_stall_s: float = Field(
        default=1800.0, ge=0,
        description="A job across the GPU workers whose ranks log no cudf-polars trace event for this many seconds is taken to be "
        "stuck (a rank deadlocked or waiting for another forever): it fails as query_stalled and its workers restart (0: never; "
        "needs cluster.gpu_trace_progress, whose events are what moves). A healthy query logs one per chunk it reads or computes.",
    )
    default_job_timeout_s: float = Field(
        default=86_400.0,
        gt=0,
        le=TIMEOUT_CEILING_S,
        description="Seconds a job may run (RUNNING until its commit starts) when its spec sets no timeout_s; past it the job "
        "fails as timed_out, its tasks are cancelled and the workers running them restarted (a hung worker included).",
    )
    max_job_timeout_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        le=TIMEOUT_CEILING_S,
        description="The largest timeout_s a spec may ask for; more is a 422 naming timeout_s.",
    )
    allowed_roots: list[str] = Field(
        default_factory=lambda: [os.getcwd()],
        description="Directories (or URL prefixes such as s3://bucket/etl/) that job sources and sinks must lie in. "
        "Default: the directory the service starts in. As an env var, a JSON list: '[\"/data\", \"/scratch\"]'.",
    )
    max_body_bytes: int = Field(default=1_048_576, gt=0, description="Largest request body accepted; larger gets 413.")
    max_queued_jobs: int = Field(default=1000, ge=1, description="PENDING jobs allowed; past this POST /jobs answers 429 with Retry-After.")
    max_running_per_token: int | None = Field(
        default=None, ge=1, description="Most jobs one token may have running; its other jobs wait while other tokens' jobs run."
    )
    default_engine: Literal["auto", "polars", "dask"] = Field(
        default="auto",
        description="Engine for specs that name none: 'polars' (Polars on the CPU, cudf-polars on GPUs), 'dask' (pandas / "
        "dask-cudf), or 'auto' (Polars unless it cannot run the spec).",
    )
    max_partitions: int = Field(
        default=100_000,
        ge=1,
        description="Most partitions (tasks) one job's graph may have; bigger jobs fail before running. A Dask-engine job whose "
        "sources alone would be read as more partitions (estimated from the files' sizes and blocksize) fails before its graph is built.",
    )
    max_planning_s: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="Seconds a job's planning (checking its spec against the sources, building its Polars query or Dask graph) may "
        "take; past it the job fails as planning_timed_out and nothing runs. Planning runs beside other jobs, in a thread that "
        "this limit, a cancel and a shutdown interrupt.",
    )
    auth: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Bearer-token auth: 'auto' requires it whenever the service binds a non-loopback address.",
    )
    dashboard_scope: Literal["read", "submit", "admin"] = Field(
        default="admin",
        description="The token scope the Dask dashboard (proxied at /dashboard/) needs with auth on. 'admin' by default: the "
        "dashboard shows every owner's tasks and the workers' logs, which owners' own routes keep apart.",
    )
    oidc: OidcSettings = Field(
        default_factory=OidcSettings,
        description="Also accept JWT bearer tokens from an identity provider (SPILLWAY_OIDC__ISSUER, __AUDIENCE, __JWKS_FILE "
        "or __JWKS_URL); needs the oidc extra. Off without an issuer.",
    )
    log_level: str = Field(default="INFO", description="Python logging level of the service.")
    server_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto",
        description="The HTTP server's event loop: 'auto' is uvloop when it is installed (it is a dependency), else asyncio's "
        "own; 'asyncio' runs without uvloop.",
    )
    server_http: Literal["auto", "httptools", "h11"] = Field(
        default="auto",
        description="The HTTP/1.1 parser: 'auto' is httptools when it is installed (it is a dependency), else h11 (pure "
        "Python, about a third more CPU per request); 'h11' runs without httptools.",
    )
    gc_tuning: bool = Field(
        default=True,
        description="After start-up, freeze the objects start-up made out of the garbage collector's reach and collect the "
        "young generation every 50,000 allocations, not 700 (service/gc_tuning.py); off: CPython's defaults.",
    )
    replica_name: str | None = Field(
        default=None,
        max_length=40,
        description="Leads this replica's id (shown as a job's replica) instead of the host name; the id adds the pid and a "
        "random suffix, so it is unique per process start.",
    )
    replica_heartbeat_s: float = Field(
        default=5.0, gt=0, le=300, description="Seconds between this replica's heartbeats in the database (and looks for dead replicas)."
    )
    replica_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="A replica whose heartbeat is this many seconds old is taken for dead: its RUNNING jobs are failed as "
        "'interrupted' (SUCCEEDED if their commit had landed) by another replica. At least twice the heartbeat.",
    )
    queue_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds between looks at the database for jobs queued on other replicas, and for cancels asked there of "
        "jobs running here. A job submitted to this replica starts without waiting for it.",
    )
    scheduler_interval_s: float = Field(default=5.0, gt=0, le=300, description="Seconds between pipeline scheduler ticks.")
    scheduler_lease_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="The pipeline scheduler ticks on one replica at a time, the holder of a lease of this many seconds renewed "
        "on each tick; when the holder dies another replica takes over once it lapses. More than scheduler_interval_s.",
    )
    retention_days: float | None = Field(
        default=None,
        gt=0,
        description="Delete terminal jobs (their records and logs, never their output) that finished more than this many days ago. "
        "None (the default): keep every job.",
    )
    retention_interval_s: float = Field(default=3600.0, gt=0, description="Seconds between retention passes (jobs and pipeline run history).")
    pipeline_runs_kept: int = Field(
        default=1000,
        ge=1,
        description="Finished runs kept per pipeline (newest logical dates first); older ones and their attempts are deleted by "
        "each retention pass. Raise it to keep more; active runs are never deleted.",
    )
    cluster: ClusterSettings = Field(default_factory=ClusterSettings, description="The Dask cluster jobs run on.")
    storage: StorageSettings = Field(
        default_factory=StorageSettings,
        description="Object stores (s3://): endpoint, region and extra fsspec options. Credentials come from the "
        "provider's usual chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws, an instance role) in each process.",
    )

    @field_validator("allowed_roots")
    @classmethod
    def _url_roots_are_object_stores(cls, roots: list[str]) -> list[str]:
        for root in roots:
            if "://" in root and (problem := url_problem(root)):
                raise ValueError(f"data root '{root}' cannot be used: {problem}")
        return roots

    @model_validator(mode="after")
    def _replica_timings_agree(self) -> Settings:
        if self.replica_timeout_s < 2 * self.replica_heartbeat_s:
            raise ValueError(
                f"replica_timeout_s ({self.replica_timeout_s:g}) must be at least twice replica_heartbeat_s "
                f"({self.replica_heartbeat_s:g}), else a live replica with one late beat is taken for dead"
            )
        if self.scheduler_lease_s <= self.scheduler_interval_s:
            raise ValueError(
                f"scheduler_lease_s ({self.scheduler_lease_s:g}) must be more than scheduler_interval_s "
                f"({self.scheduler_interval_s:g}), else the scheduler's lease lapses between its ticks"
            )
        return self

    @model_validator(mode="after")
    def _default_timeout_within_the_maximum(self) -> Settings:
        if self.default_job_timeout_s > self.max_job_timeout_s:
            raise ValueError(
                f"default_job_timeout_s ({self.default_job_timeout_s:g}) is over max_job_timeout_s ({self.max_job_timeout_s:g}): lower it or raise the maximum"
            )
        return self

    def model_post_init(self, context: Any, /) -> None:
        # The sources, sinks and graphs this process builds all open paths through jobs.storage.
        configure_storage(self.storage)
        # Every spec this process parses from now on is held to this service's maximum timeout.
        limit_timeouts(self.max_job_timeout_s)


    @property
    def migrate_on_start(self) -> bool:
        """Whether the service upgrades the database schema as it starts."""
        if self.database_migrate != "auto":
            return self.database_migrate == "on"
        return self.database_url.startswith("sqlite")

    @property
    def auth_required(self) -> bool:
        """Whether requests need a bearer token."""
        if self.auth != "auto":
            return self.auth == "on"
        try:
            return not ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: only localhost counts as loopback
            return self.host != "localhost"
