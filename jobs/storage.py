"""Where data lives: local paths and object-store URLs (``s3://bucket/key``), and how to open them.

Every read and write passes :func:`storage_options` explicitly (``storage_options=``
to dask, ``filesystem=`` to pyarrow), so the options travel inside the task graph to
the Dask workers: separate processes, maybe on other hosts, that never see the
service's settings. Credentials are deliberately not among them: each process finds
its own through the provider's usual chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, ``~/.aws``, an instance role), so no secret is written into
a graph that the scheduler and dashboard can show.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from pydantic import BaseModel, ConfigDict, Field

from spillway.jobs.errors import SpecError
from spillway.jobs.status import ResultManifest

#: URL schemes a data root may use: object stores whose commit protocol docs/sinks.md describes.
OBJECT_STORE_SCHEMES = frozenset({"s3"})
MANIFEST_NAME = "_manifest.json"
SUCCESS_MARKER = "_SUCCESS"


class StorageSettings(BaseModel):
    """How the service and its workers reach object stores (``SPILLWAY_STORAGE__*``)."""

    model_config = ConfigDict(extra="forbid")

    s3_endpoint_url: str | None = Field(
        default=None, description="An S3-compatible endpoint (MinIO, Ceph, moto), e.g. http://127.0.0.1:9000; AWS itself when unset."
    )
    s3_region: str | None = Field(default=None, description="The S3 region; botocore's own default (AWS_DEFAULT_REGION, ~/.aws) when unset.")
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Extra fsspec options per protocol, passed through as storage_options, "
        "e.g. '{\"s3\": {\"requester_pays\": true}}'. Put no secrets here: they would travel in task graphs.",
    )
    lock_directory: str | None = Field(
        default=None,
        description="Local directory of the sink commit locks (default: <tmp>/spillway-locks). "
        "Every service process that may write the same sinks must share it.",
    )

    def options_for(self, protocol: str) -> dict[str, Any]:
        """The fsspec options for ``protocol``: the pass-through ones, then the named settings."""
        options = dict(self.options.get(protocol, {}))
        if protocol == "s3":
            client = dict(options.get("client_kwargs", {}))
            if self.s3_endpoint_url:
                client.setdefault("endpoint_url", self.s3_endpoint_url)
            if self.s3_region:
                client.setdefault("region_name", self.s3_region)
            if client:
                options["client_kwargs"] = client
        return options


_current = StorageSettings()


def configure(settings: StorageSettings) -> None:
    """Use ``settings`` for every path this process opens from now on (the service's Settings call this)."""
    global _current
    _current = settings


def current() -> StorageSettings:
    """The storage settings in effect."""
    return _current


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://…``) rather than a local path."""
    return "://" in path


def storage_options(path: str) -> dict[str, Any]:
    """The options to open ``path`` with: empty for a local path."""
    if not is_url(path):
        return {}
    return _current.options_for(path.split("://", 1)[0])


def filesystem(path: str, *, field: str | None = None) -> tuple[AbstractFileSystem, str]:
    """The filesystem holding ``path`` and the path as that filesystem names it.

    The listing cache is dropped first: workers write objects that the service's
    cached listings would not show.

    Raises
    ------
    SpecError
        If the package for the URL's scheme is missing (naming ``field``).
    """
    try:
        fs, stripped = fsspec.core.url_to_fs(os.path.expanduser(path), **storage_options(path))
    except ImportError as exc:
        raise SpecError(f"'{path}' needs a package that is not installed: {exc} (for s3://, pip install '.[s3]')", field=field) from exc
    fs.invalidate_cache()
    return fs, stripped.rstrip("/") or stripped


def load_manifest(fs: AbstractFileSystem, directory: str) -> ResultManifest | None:
    """The manifest of a committed sink at ``directory``, or None when it has none."""
    try:
        return ResultManifest.model_validate_json(fs.cat_file(f"{directory}/{MANIFEST_NAME}"))
    except FileNotFoundError:
        return None


@contextmanager
def commit_lock(location: str) -> Iterator[None]:
    """Hold the exclusive commit lock of one sink (an ``flock`` on a local file).

    Commits to a sink run one at a time, whether from this process or another on the
    host, so none works from a manifest another is replacing.
    """
    directory = Path(_current.lock_directory or Path(tempfile.gettempdir()) / "spillway-locks")
    directory.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(location.encode()).hexdigest()[:32] + ".lock"
    # Never deleted: removing a lock file while another process waits on it would split the lock.
    with open(directory / name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
