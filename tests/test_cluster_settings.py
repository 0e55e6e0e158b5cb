"""Cluster settings are validated before anything starts, with errors that say how to fix them."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import ValidationError

from spillway.cluster.factory import resolve_backend
from spillway.cluster.gpu import UCX_HINT, cuda_cluster_kwargs
from spillway.cluster.settings import ClusterSettings, parse_memory
from spillway.jobs.errors import ClusterConfigError
from spillway.service.config import Settings


@pytest.mark.parametrize(("text", "expected"), [("auto", None), ("0.5", 0.5), ("1", 1.0), ("8GB", 8_000_000_000), ("512MiB", 512 * 2**20), ("1000000", 1_000_000)])
def test_memory_forms(text: str, expected: object) -> None:
    assert parse_memory(text, field="x") == expected


@pytest.mark.parametrize("text", ["0", "-0.5", "1.5", "lots"])
def test_bad_memory_is_refused_by_the_settings(text: str) -> None:
    with pytest.raises(ValidationError, match="limit"):
        ClusterSettings(device_memory_limit=text)


def test_env_reaches_nested_cluster_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPILLWAY_CLUSTER__N_WORKERS", "3")
    monkeypatch.setenv("SPILLWAY_CLUSTER__DEVICE_MEMORY_LIMIT", "0.8")
    monkeypatch.setenv("SPILLWAY_MAX_CONCURRENT_JOBS", "5")
    settings = Settings()
    assert settings.cluster.n_workers == 3 and settings.cluster.device_memory_limit == "0.8" and settings.max_concurrent_jobs == 5


def test_more_gpus_than_visible_is_refused() -> None:
    with pytest.raises(ClusterConfigError, match="asks for 3 GPUs .* but 2 are visible"):
        cuda_cluster_kwargs(ClusterSettings(cuda_visible_devices="0,1,2"), visible_gpus=2)


@pytest.mark.skipif(importlib.util.find_spec("distributed_ucxx") is not None, reason="distributed-ucxx is installed here")
def test_ucx_without_distributed_ucxx_names_the_extra() -> None:
    with pytest.raises(ClusterConfigError) as info:
        cuda_cluster_kwargs(ClusterSettings(protocol="ucx"), visible_gpus=2)
    assert info.value.message == UCX_HINT and "pip install '.[gpu]'" in info.value.message


def test_gpu_kwargs_follow_settings() -> None:
    settings = ClusterSettings(
        cuda_visible_devices="1", device_memory_limit="0.5", memory_limit="16GB", rmm_pool_size="8GB", rmm_maximum_pool_size="8GB", threads_per_worker=2
    )
    kwargs = cuda_cluster_kwargs(settings, visible_gpus=2)
    assert kwargs["CUDA_VISIBLE_DEVICES"] == "1" and kwargs["n_workers"] == 1
    assert kwargs["device_memory_limit"] == 0.5 and kwargs["memory_limit"] == 16_000_000_000
    assert kwargs["enable_cudf_spill"] is True and kwargs["cudf_spill_stats"] == 1
    assert kwargs["rmm_pool_size"] == "8GB" and kwargs["rmm_maximum_pool_size"] == "8GB" and kwargs["threads_per_worker"] == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ClusterSettings(rmm_pool_size="8GB", rmm_async=True), "not both"),
        (ClusterSettings(rmm_maximum_pool_size="8GB"), "needs rmm_pool_size"),
        (ClusterSettings(enable_cudf_spill=False, cudf_spill_device_limit="1GB"), "needs enable_cudf_spill"),
    ],
)
def test_conflicting_gpu_settings(settings: ClusterSettings, message: str) -> None:
    with pytest.raises(ClusterConfigError, match=message):
        cuda_cluster_kwargs(settings, visible_gpus=1)


def test_backend_auto_without_gpu_is_pandas_and_says_why() -> None:
    backend, reason = resolve_backend(ClusterSettings(backend="auto"))
    if backend == "pandas":
        assert "running on CPU with pandas" in reason
    else:  # a GPU machine with the gpu extra
        assert "GPU(s) visible" in reason


@pytest.mark.skipif(importlib.util.find_spec("cudf") is not None, reason="the gpu extra is installed here")
def test_forcing_cudf_without_the_extra_names_it() -> None:
    with pytest.raises(ClusterConfigError, match=r"pip install '\.\[gpu\]'"):
        resolve_backend(ClusterSettings(backend="cudf"))


def test_a_gpu_listed_twice_needs_allow_gpu_sharing() -> None:
    with pytest.raises(ClusterConfigError) as refused:
        cuda_cluster_kwargs(ClusterSettings(cuda_visible_devices="0,0"), visible_gpus=1)
    assert refused.value.field == "cluster.cuda_visible_devices" and "allow_gpu_sharing" in refused.value.message
    shared = cuda_cluster_kwargs(ClusterSettings(cuda_visible_devices="0,0", allow_gpu_sharing=True), visible_gpus=1)
    assert (shared["CUDA_VISIBLE_DEVICES"], shared["n_workers"]) == ("0,0", 2)


@pytest.mark.parametrize(("limit", "devices", "expected"), [
    ("auto", "0,0", 0.4),      # two workers on one GPU: 80 % of it between them, not each
    ("0.6", "0,0,0", 0.2),
    ("auto", "0,1", None),     # GPUs of their own: dask-cuda's default
    ("0.5", "0,1", 0.5),
    ("20GB", "0,0", 20 * 10**9),  # bytes are the user's own
    ("auto", "0,0,1", 0.4),    # the most shared GPU sets the share
])
def test_workers_sharing_a_gpu_split_its_memory(limit: str, devices: str, expected: float | int | None) -> None:
    settings = ClusterSettings(cuda_visible_devices=devices, allow_gpu_sharing=True, device_memory_limit=limit)
    kwargs = cuda_cluster_kwargs(settings, visible_gpus=2)
    assert kwargs.get("device_memory_limit") == pytest.approx(expected) if expected is not None else "device_memory_limit" not in kwargs
