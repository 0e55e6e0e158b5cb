"""s3:// sources and sinks through the real service, against moto's S3 server on loopback.

The server runs in this process; the service, its cluster and the cluster's worker
processes reach it over TCP with the endpoint from ``SPILLWAY_STORAGE__S3_ENDPOINT_URL``
and credentials from the usual AWS environment variables.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow.parquet as pq
import pytest

moto_server = pytest.importorskip("moto.server", reason="the S3 tests need moto's server mode: pip install 'moto[server]' (the test extra)")
s3fs = pytest.importorskip("s3fs", reason="the S3 tests need s3fs: pip install '.[s3]'")

from spillway.jobs.status import JobStatus, ResultManifest  # noqa: E402
from spillway.service.client import ApiError, SpillwayClient  # noqa: E402
from tests.conftest import ServiceProcess, start_service, wait_terminal  # noqa: E402
from tests.test_service_e2e import revenue_reference  # noqa: E402

BUCKET = "spillway-test"
ROOT = f"s3://{BUCKET}/etl"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its buckets per process, not per server: start from none, whichever module ran before.
    httpx.post(f"http://{host}:{port}/moto-api/reset", timeout=30).raise_for_status()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def s3(endpoint: str, sample_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """This process's view of the bucket, holding the sources: sales parquet, a hive copy, products CSV, JSON lines."""
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
    fs.mkdir(BUCKET)
    fs.put(str(sample_data["sales"]) + "/", f"{BUCKET}/etl/in/sales/", recursive=True)
    fs.put(str(sample_data["products"]), f"{BUCKET}/etl/in/products.csv")
    local = tmp_path_factory.mktemp("s3src")
    sales = pd.read_parquet(sample_data["sales"])
    sales.to_parquet(local / "hive", partition_cols=["region"], index=False)
    fs.put(str(local / "hive") + "/", f"{BUCKET}/etl/in/hive/", recursive=True)
    pd.read_csv(sample_data["products"]).to_json(local / "products.jsonl", orient="records", lines=True)
    fs.put(str(local / "products.jsonl"), f"{BUCKET}/etl/in/products.jsonl")
    fs.mkdir("other-bucket")
    return fs


@pytest.fixture(scope="module", params=["polars", "dask"])
def s3_service(endpoint: str, s3: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    """A service reading and writing the bucket, each test run once with each engine as the default."""
    env = {
        **CREDENTIALS,
        "SPILLWAY_DEFAULT_ENGINE": request.param,
        "SPILLWAY_STORAGE__S3_ENDPOINT_URL": endpoint,
        "SPILLWAY_ALLOWED_ROOTS": json.dumps(["/tmp", f"{ROOT}/"]),
        "SPILLWAY_MAX_CONCURRENT_JOBS": "2",
    }
    proc = start_service(tmp_path_factory.mktemp("s3svc"), extra_env=env)
    yield proc
    proc.stop()


@pytest.fixture()
def api(s3_service: ServiceProcess) -> Iterator[SpillwayClient]:
    with s3_service.client() as client:
        yield client


@pytest.fixture()
def prefix(request: pytest.FixtureRequest) -> str:
    """A sink prefix of this test's own."""
    return f"{ROOT}/out/{request.node.name.replace('[', '_').replace(']', '')}"


def succeed(api: SpillwayClient, spec: dict[str, Any]) -> ResultManifest:
    job = wait_terminal(api, api.submit(spec).id, timeout=180)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.result is not None
    return job.result


def committed(s3: Any, url: str) -> pd.DataFrame:
    """The sink's data as a reader honouring ``_manifest.json`` reads it; checks the manifest against the bucket."""
    root = url.removeprefix("s3://")
    s3.invalidate_cache()
    manifest = ResultManifest.model_validate_json(s3.cat_file(f"{root}/_manifest.json"))
    assert s3.exists(f"{root}/_SUCCESS")
    assert manifest.location == url
    frames = []
    for entry in manifest.files:
        assert s3.info(f"{root}/{entry.path}")["size"] == entry.size_bytes
        with s3.open(f"{root}/{entry.path}", "rb", compression="gzip" if entry.path.endswith(".gz") else None) as handle:
            frame = pd.read_csv(handle) if manifest.format == "csv" else pd.read_parquet(handle)
        assert len(frame) == entry.rows
        for part in Path(entry.path).parts[:-1]:  # hive folders
            key, value = part.split("=", 1)
            frame[key] = value
        frames.append(frame)
    data = pd.concat(frames, ignore_index=True)
    assert manifest.total_rows == len(data)
    return data


def revenue_spec(source: dict[str, Any], products: dict[str, Any], sink: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": source,
        "steps": [
            {"op": "filter", "expr": "amount > 0 and region != 'test'"},
            {"op": "assign", "column": "net", "expr": "amount * (1 - fillna(discount, 0))"},
            {"op": "join", "right": products, "on": ["product_id"]},
            {
                "op": "groupby",
                "by": ["region", "category"],
                "aggs": {"revenue": {"func": "sum", "column": "net"}, "orders": {"func": "count", "column": "order_id"}},
            },
        ],
        "sink": sink,
    }


def sorted_revenue(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.assign(region=frame["region"].astype(str))[["region", "category", "revenue", "orders"]]
    return frame.sort_values(["region", "category"]).reset_index(drop=True)


def test_s3_parquet_and_csv_sources_to_s3_parquet(
    api: SpillwayClient, s3_service: ServiceProcess, s3: Any, sample_data: dict[str, Path], sales_frame: pd.DataFrame, prefix: str
) -> None:
    spec = revenue_spec({"format": "parquet", "path": f"{ROOT}/in/sales"}, {"format": "csv", "path": f"{ROOT}/in/products.csv"}, {"path": prefix})
    job = wait_terminal(api, api.submit(spec).id, timeout=180)
    assert job.state == JobStatus.SUCCEEDED and job.result is not None, job.error
    # The service's default engine ran it: object-store sources no longer send a job to the Dask engine.
    assert job.progress.engine is not None and job.progress.engine.engine == s3_service.env["SPILLWAY_DEFAULT_ENGINE"]
    manifest = job.result
    assert manifest.format == "parquet" and manifest.version == 1 and len(manifest.files) >= 1
    assert all(f.path.startswith("part.") and f.job_id for f in manifest.files)
    expected = revenue_reference(sales_frame, sample_data["products"])
    pd.testing.assert_frame_equal(sorted_revenue(committed(s3, prefix)), expected, check_dtype=False, rtol=1e-9)


def test_s3_glob_and_jsonl_sources_to_s3_gzip_csv(api: SpillwayClient, s3: Any, sample_data: dict[str, Path], sales_frame: pd.DataFrame, prefix: str) -> None:
    spec = revenue_spec(
        {"format": "parquet", "path": f"{ROOT}/in/sales/part-00[01].parquet"},
        {"format": "jsonl", "path": f"{ROOT}/in/products.jsonl"},
        {"path": prefix, "format": "csv", "compression": "gzip"},
    )
    manifest = succeed(api, spec)
    assert manifest.format == "csv" and all(f.path.endswith(".csv.gz") for f in manifest.files)
    first_two = pd.concat(pd.read_parquet(sample_data["sales"] / f"part-00{i}.parquet") for i in (0, 1))
    expected = revenue_reference(first_two, sample_data["products"])
    pd.testing.assert_frame_equal(sorted_revenue(committed(s3, prefix)), expected, check_dtype=False, rtol=1e-9)


def test_s3_hive_source_to_partitioned_s3_sink_with_row_groups(api: SpillwayClient, s3: Any, sales_frame: pd.DataFrame, prefix: str) -> None:
    spec = {
        "source": {"format": "parquet", "path": f"{ROOT}/in/hive"},
        "steps": [{"op": "filter", "expr": "region != 'test'"}, {"op": "select", "columns": ["order_id", "quantity", "region"]}],
        "sink": {"path": prefix, "partition_on": ["region"], "row_group_size": 1000, "compression": "zstd"},
    }
    manifest = succeed(api, spec)
    assert {Path(f.path).parts[0] for f in manifest.files} == {"region=east", "region=north", "region=south", "region=west"}
    assert [c.name for c in manifest.columns] == ["order_id", "quantity", "region"]
    root = prefix.removeprefix("s3://")
    for entry in manifest.files[:3]:
        with s3.open(f"{root}/{entry.path}", "rb") as handle:
            metadata = pq.ParquetFile(handle).metadata
        assert all(metadata.row_group(i).num_rows <= 1000 for i in range(metadata.num_row_groups))
        assert metadata.num_row_groups == -(-entry.rows // 1000)
        assert metadata.row_group(0).column(0).compression == "ZSTD"
    got = committed(s3, prefix).sort_values("order_id").reset_index(drop=True)
    want = sales_frame[sales_frame.region != "test"][["order_id", "quantity", "region"]].sort_values("order_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want.astype({"region": str}), check_dtype=False)


def test_s3_write_modes_commit_through_the_manifest(api: SpillwayClient, s3: Any, sales_frame: pd.DataFrame, prefix: str, tmp_path: Path) -> None:
    def by_region(region: str, mode: str) -> dict[str, Any]:
        return {
            "source": {"format": "parquet", "path": f"{ROOT}/in/sales"},
            "steps": [{"op": "filter", "expr": f"region == '{region}'"}, {"op": "select", "columns": ["order_id", "amount"]}],
            "sink": {"path": prefix, "mode": mode},
        }

    def expected(*regions: str) -> pd.DataFrame:
        return sales_frame[sales_frame.region.isin(regions)][["order_id", "amount"]].sort_values("order_id").reset_index(drop=True)

    def sink_data() -> pd.DataFrame:
        return committed(s3, prefix).sort_values("order_id").reset_index(drop=True)

    root = prefix.removeprefix("s3://")
    first = succeed(api, by_region("north", "error"))
    with pytest.raises(ApiError) as info:
        api.submit(by_region("north", "error"))
    assert info.value.status == 409 and info.value.detail.field == "sink.path"

    # Two appends at once: the commit lock serialises them; both batches are listed.
    ids = [api.submit(by_region(region, "append")).id for region in ("south", "east")]
    jobs = [wait_terminal(api, job_id, timeout=180) for job_id in ids]
    assert [j.state for j in jobs] == [JobStatus.SUCCEEDED] * 2, [j.error for j in jobs]
    pd.testing.assert_frame_equal(sink_data(), expected("north", "south", "east"), check_dtype=False)
    assert sorted(j.result.version for j in jobs if j.result) == [2, 3]

    # Part files no manifest lists (another job's append in flight) are invisible to a manifest reader.
    stray = f"{root}/part.0123456789abcdef.000000.parquet"
    s3.pipe_file(stray, s3.cat_file(f"{root}/{first.files[0].path}"))
    downstream = succeed(api, {"source": {"format": "parquet", "path": prefix}, "sink": {"path": str(tmp_path / "copy")}})
    assert downstream.total_rows == len(expected("north", "south", "east"))

    replaced = succeed(api, by_region("west", "overwrite"))
    assert replaced.version == 4 and {f.job_id for f in replaced.files} != {first.files[0].job_id}
    pd.testing.assert_frame_equal(sink_data(), expected("west"), check_dtype=False)
    s3.invalidate_cache()
    left = {key.rsplit("/", 1)[-1] for key in s3.find(root)}
    assert left == {"_manifest.json", "_SUCCESS", stray.rsplit("/", 1)[-1]} | {f.path for f in replaced.files}, "old files removed after the commit"

    # Other columns: refused at submit where the service passes the job's columns to
    # ensure_sink_free, else while planning; the same error either way, nothing written.
    mismatched = {**by_region("west", "append"), "steps": [{"op": "select", "columns": ["order_id", "region"]}]}
    try:
        job = wait_terminal(api, api.submit(mismatched).id, timeout=180)
        error = job.error
    except ApiError as exc:
        error = exc.detail
    assert error is not None and error.code == "sink_schema_mismatch" and error.field == "sink.mode"
    pd.testing.assert_frame_equal(sink_data(), expected("west"), check_dtype=False)


def test_s3_racing_first_writes_commit_one_and_clean_up_the_other(api: SpillwayClient, s3: Any, prefix: str) -> None:
    spec = {"source": {"format": "parquet", "path": f"{ROOT}/in/sales"}, "steps": [{"op": "limit", "n": 100}], "sink": {"path": prefix}}
    outcomes: list[str] = []

    def submit() -> None:
        try:
            outcomes.append(wait_terminal(api, api.submit(spec).id, timeout=180).state.value)
        except ApiError as exc:  # the other job committed first
            outcomes.append(exc.detail.code)

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(200)
    assert sorted(outcomes) in (["FAILED", "SUCCEEDED"], ["SUCCEEDED", "sink_exists"])
    root = prefix.removeprefix("s3://")
    manifest = ResultManifest.model_validate_json(s3.cat_file(f"{root}/_manifest.json"))
    s3.invalidate_cache()
    parts = {key.rsplit("/", 1)[-1] for key in s3.find(root) if key.rsplit("/", 1)[-1].startswith("part.")}
    assert parts == {f.path for f in manifest.files}, "the loser's part files are removed"


@pytest.mark.parametrize(
    ("source", "sink", "field"),
    [
        ("s3://other-bucket/in/x.parquet", f"{ROOT}/out/r1", "source.path"),
        (f"s3://{BUCKET}/private/x.parquet", f"{ROOT}/out/r2", "source.path"),
        (f"{ROOT}/../private/x.parquet", f"{ROOT}/out/r3", "source.path"),
        (f"{ROOT}x/in/x.parquet", f"{ROOT}/out/r4", "source.path"),
        (f"{ROOT}/in/sales::file:///etc/passwd", f"{ROOT}/out/r5", "source.path"),
        ("http://127.0.0.1:1/etl/x.parquet", f"{ROOT}/out/r6", "source.path"),
        (f"S3://{BUCKET}/etl/in/sales", f"{ROOT}/out/r7", "source.path"),
        (f"{ROOT}/in/sales", f"s3://{BUCKET}/elsewhere", "sink.path"),
        (f"{ROOT}/in/sales", f"{ROOT}/./out/r8", "sink.path"),
        (f"{ROOT}/in/sales", "file:///tmp/out", "sink.path"),
    ],
)
def test_s3_paths_outside_the_url_root_are_refused(s3_service: ServiceProcess, source: str, sink: str, field: str) -> None:
    spec = {"source": {"format": "parquet", "path": source}, "sink": {"path": sink}}
    with httpx.Client(base_url=s3_service.url, timeout=30) as http:
        response = http.post("/jobs", json=spec)
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "path_not_allowed" and error["field"] == field
    assert (source if field == "source.path" else sink) in error["message"]


def test_missing_s3_source_names_the_field(api: SpillwayClient) -> None:
    with pytest.raises(ApiError) as info:
        api.submit({"source": {"format": "parquet", "path": f"{ROOT}/in/nothing-here/*.parquet"}, "sink": {"path": f"{ROOT}/out/none"}})
    assert info.value.status == 422 and info.value.detail.code == "source_not_found" and info.value.detail.field == "source.path"
