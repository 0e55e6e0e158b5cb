"""``create_app(settings)``: the FastAPI control plane and the lifetime of its cluster."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from spillway.cluster.factory import ClusterHandle, start_cluster
from spillway.cluster.manager import JobManager
from spillway.cluster.supervisor import ClusterSupervisor
from spillway.jobs.sandbox import check_paths
from spillway.jobs.validate import validate_submission
from spillway.service.auth import redact_tokens
from spillway.service.config import Settings
from spillway.service.errors import AnswerUnexpectedErrors, BodySizeLimit, install_error_handlers
from spillway.service.gc_tuning import tune_gc
from spillway.service.http_metrics import HttpMetrics
from spillway.service.job_changes import JobChanges
from spillway.service.metrics import ServiceMetrics
from spillway.service.oidc import OidcVerifier
from spillway.service.pipelines import PipelineScheduler, PipelineServices, PipelineStore
from spillway.service.pipelines.bridge import job_callbacks
from spillway.service.replica_heartbeat import ReplicaHeartbeat, SchedulerLease
from spillway.service.replicas import ReplicaIdentity
from spillway.service.retention import RetentionTask
from spillway.service.routes import cluster as cluster_routes
from spillway.service.routes import dashboard as dashboard_routes
from spillway.service.routes import docs as docs_routes
from spillway.service.routes import health as health_routes
from spillway.service.routes import jobs as job_routes
from spillway.service.routes import pipelines as pipeline_routes
from spillway.service.routes import result as result_routes
from spillway.service.routes import schema as schema_routes
from spillway.service.routes import spec_text as spec_text_routes
from spillway.service.routes import tokens as token_routes
from spillway.service.routes import ui as ui_routes
from spillway.service.routes import validate as validate_routes
from spillway.service.routes.deps import submission_limits
from spillway.service.schemas import ErrorBody
from spillway.service.store import JobStore

log = logging.getLogger("spillway")


_COMMON_ERRORS = {
    400: "Malformed JSON.",
    401: "A bearer token is required (auth on).",
    403: "The token's scope, or the data roots, do not allow this.",
    413: "The request body is too large.",
    422: "A parameter or body field is invalid; the field is named.",
    500: "An unexpected error; the service log has the details.",
}


@dataclass
class Services:
    """What the routes need, built once in the lifespan and injected."""

    settings: Settings
    store: JobStore
    cluster: ClusterHandle
    manager: JobManager
    metrics: ServiceMetrics
    changes: JobChanges


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service: store, cluster and job manager start with the app and stop with it."""
    settings = settings or Settings()
    metrics = ServiceMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = JobStore(settings.database_url, migrate=settings.migrate_on_start)
        changes = JobChanges(asyncio.get_running_loop(), versions=store.versions)
        store.subscribe(changes.notify)
        cluster = await start_cluster(settings.cluster)
        log.info("backend %s: %s", cluster.backend, cluster.backend_reason)
        replica = ReplicaIdentity.of_this_process(settings.replica_name)
        manager = JobManager(
            store,
            cluster,
            max_concurrent=settings.max_concurrent_jobs,
            progress_interval=settings.progress_interval_s,
            max_partitions=settings.max_partitions,
            max_planning_s=settings.max_planning_s,
            max_running_per_owner=settings.max_running_per_token,
            default_engine=settings.default_engine,
            default_timeout_s=settings.default_job_timeout_s,
            hung_worker_s=settings.hung_worker_s,
            multi_gpu_stall_s=settings.multi_gpu_stall_s,
            allowed_roots=settings.allowed_roots,
            metrics=metrics,
            replica_id=replica.id,
            poll_interval_s=settings.queue_poll_s,
        )
        heartbeat = ReplicaHeartbeat(
            store.replicas, replica, interval_s=settings.replica_heartbeat_s, timeout_s=settings.replica_timeout_s,
            settle_orphans=manager.recover_orphans, fenced=manager.abandon_running,
        )
        await heartbeat.register()  # before any claim: a job's replica without a row is taken for dead
        await manager.start()
        heartbeat.start()
        services = app.state.services = Services(settings, store, cluster, manager, metrics, changes)

        def use_new_cluster(new: ClusterHandle) -> None:
            services.cluster = new
            manager.replace_cluster(new)

        supervisor = ClusterSupervisor(settings.cluster, cluster, use_new_cluster)
        supervisor.start()
        pipeline_store = PipelineStore(settings.database_url, migrate=settings.migrate_on_start)
        submit, get_job = job_callbacks(
            # A run is checked as a POST /jobs is (data roots, the partition estimate, the engine), before its job is stored.
            store, manager.enqueue, backend=cluster.backend, validate=functools.partial(validate_submission, **submission_limits(settings))
        )
        lease = SchedulerLease(store.replicas, replica.id, settings.scheduler_lease_s)
        pipeline_scheduler = PipelineScheduler(
            pipeline_store, submit=submit, get_job=get_job, interval_s=settings.scheduler_interval_s, leader=lease
        )
        app.state.pipelines = PipelineServices(pipeline_store, pipeline_scheduler, check_job=functools.partial(check_paths, roots=settings.allowed_roots))
        await pipeline_scheduler.start()
        metrics.watch(store, pipeline_store)
        retention = RetentionTask(
            store,
            pipeline_store,
            retention_days=settings.retention_days,
            runs_kept=settings.pipeline_runs_kept,
            interval_s=settings.retention_interval_s,
        )
        retention.start()
        if settings.gc_tuning:
            tune_gc()
        log.info("spillway ready: %s cluster, dashboard %s", cluster.kind, cluster.dashboard_link or "off")
        try:
            yield
        finally:
            await app.state.dashboard_proxy.close()
            await changes.close()
            await retention.stop()
            await pipeline_scheduler.stop()
            await lease.release()
            await heartbeat.stop()
            await supervisor.stop()
            await manager.stop()
            await heartbeat.deregister()  # after the manager settled its jobs, so none is left to the others
            await services.cluster.close()
            await asyncio.to_thread(store.close)
            await asyncio.to_thread(pipeline_store.close)

    app = FastAPI(
        title="Spillway",
        summary="GPU ETL jobs on Dask: submit a spec, watch its partitions, get its result files.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from service/routes/docs.py, with their assets: no CDN
        redoc_url=None,
        # Any route can answer these, in the stable error shape (see service/errors.py).
        responses={code: {"model": ErrorBody, "description": text} for code, text in _COMMON_ERRORS.items()},
    )
    # Built now, so that a bad key set stops the service before it starts anything.
    app.state.oidc = OidcVerifier(settings.oidc) if settings.oidc.enabled else None
    app.state.dashboard_proxy = dashboard_routes.DashboardProxy()
    install_error_handlers(app)
    redact_tokens()
    app.add_middleware(BodySizeLimit, limit=settings.max_body_bytes)
    app.add_middleware(AnswerUnexpectedErrors)  # inside the metrics: they count its 500s
    app.add_middleware(HttpMetrics, observe=metrics.http_request)  # outermost: counts the 413s too
    app.include_router(job_routes.router)
    app.include_router(cluster_routes.router)
    app.include_router(dashboard_routes.router)
    app.include_router(health_routes.router)
    app.include_router(pipeline_routes.router)
    app.include_router(schema_routes.router)
    app.include_router(token_routes.router)
    app.include_router(ui_routes.router)
    app.include_router(docs_routes.router)
    app.include_router(validate_routes.router)
    app.include_router(result_routes.router)
    app.include_router(spec_text_routes.router)
    return app
