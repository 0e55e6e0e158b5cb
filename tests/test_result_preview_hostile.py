"""``GET /jobs/{id}/result?head=N`` (and ``spillway result --head``) against sinks changed by hand after the commit.

The hostile run's S3, W2, W3, W4, E3, C3 and H1 (/tmp/hostile/REPORT.md): links out of the data root,
replaced or broken part files, gzip CSV, hive-encoded partition values, CSV types, a 5,000-column preview.
The service here has one data root of its own, so a file beside it is outside every root.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from spillway.jobs.status import JobStatus, ResultManifest
from spillway.service.cli import app as cli_app
from spillway.service.launcher import ServiceProcess
from tests.conftest import start_service, wait_terminal

SECRET = "SECRET-OUTSIDE-ROOT"


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The one data root, a folder outside it, and a small source inside it."""
    root = tmp_path_factory.mktemp("root")
    outside = tmp_path_factory.mktemp("outside")
    source = root / "in" / "small.parquet"
    source.parent.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "v": [0.5, 1.5, 2.5]}), source)
    return {"root": root, "outside": outside, "source": source}


@pytest.fixture(scope="module")
def rooted(tmp_path_factory: pytest.TempPathFactory, places: dict[str, Path]) -> Iterator[ServiceProcess]:
    """A live service whose only data root is ``places['root']``."""
    proc = start_service(tmp_path_factory.mktemp("rooted"), extra_env={"SPILLWAY_ALLOWED_ROOTS": json.dumps([str(places["root"])])})
    yield proc
    proc.stop()


def _run(service: ServiceProcess, spec: dict[str, Any]) -> tuple[str, ResultManifest]:
    with service.client() as client:
        job = wait_terminal(client, client.submit(spec).id)
    assert job.state == JobStatus.SUCCEEDED, job.error
    assert job.result is not None
    return job.id, job.result


def _job(places: dict[str, Path], name: str, source: Path | None = None, **sink: Any) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"format": "parquet", "path": str(source or places["source"])},
        "sink": {"path": str(places["root"] / "out" / name), **sink},
    }


def _preview(service: ServiceProcess, job_id: str, head: int = 20) -> httpx.Response:
    return httpx.get(f"{service.url}/jobs/{job_id}/result", params={"head": head}, timeout=120)


def _refused(answer: httpx.Response, codes: tuple[int, ...], naming: str) -> dict[str, Any]:
    """The answer is a refusal in the stable error shape, naming ``naming``, with nothing of the secret in it."""
    assert answer.status_code in codes, answer.text
    error = answer.json()["error"]
    assert set(error) <= {"code", "message", "field"} and error["code"] and naming in error["message"], error
    assert SECRET not in answer.text
    return error


def _secret_parquet(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [42], "p": [SECRET], "v": [0.0]}), path)


def _cli_head(service: ServiceProcess, job_id: str) -> Any:
    return CliRunner().invoke(cli_app, ["result", job_id, "--head", "3", "--url", service.url], env={"COLUMNS": "200"})


# --- S3: links out of the root ----------------------------------------------------------------


@pytest.mark.parametrize("swapped", ["part file", "sink directory", "partition folder"])
def test_a_link_swapped_into_the_sink_is_refused_never_followed(rooted: ServiceProcess, places: dict[str, Path], swapped: str) -> None:
    name = f"link-{swapped.replace(' ', '-')}"
    sink = {"partition_on": ["p"]} if swapped == "partition folder" else {}
    job_id, manifest = _run(rooted, _job(places, name, **sink))
    location = Path(manifest.location)
    first = manifest.files[0].path
    outside = places["outside"] / name
    if swapped == "part file":
        _secret_parquet(outside / "secret.parquet")
        (location / first).unlink()
        (location / first).symlink_to(outside / "secret.parquet")
        naming = first
    elif swapped == "sink directory":
        shutil.move(location, outside)
        for file in manifest.files:
            _secret_parquet(outside / file.path)
        location.symlink_to(outside)
        naming = str(location)
    else:
        folder = first.split("/")[0]
        _secret_parquet(outside / first.split("/")[-1])
        shutil.rmtree(location / folder)
        (location / folder).symlink_to(outside)
        naming = first
    _refused(_preview(rooted, job_id), (403, 409), naming)


# --- W4: another file at a listed path ------------------------------------------------------------


def test_a_part_file_replaced_after_the_commit_is_a_409_naming_it(rooted: ServiceProcess, places: dict[str, Path]) -> None:
    job_id, manifest = _run(rooted, _job(places, "replaced"))
    part = Path(manifest.location) / manifest.files[0].path
    pq.write_table(pa.table({"zzz": [1, 2]}), part)
    error = _refused(_preview(rooted, job_id), (409,), manifest.files[0].path)
    assert error["code"] == "result_unreadable" and "zzz" not in error["message"]


def test_a_part_of_the_same_size_with_other_columns_is_a_409(rooted: ServiceProcess, places: dict[str, Path]) -> None:
    job_id, manifest = _run(rooted, _job(places, "same-size"))
    part = Path(manifest.location) / manifest.files[0].path
    original = part.read_bytes()
    # The same bytes with a column renamed (same length): only the schema check can tell.
    part.write_bytes(original.replace(b"v", b"w"))
    assert part.stat().st_size == len(original)
    _refused(_preview(rooted, job_id), (409,), manifest.files[0].path)


# --- E3 / C3: compressed CSV, and parts no reader takes ---------------------------------------------


def test_a_gzip_csv_sink_previews_its_rows_in_the_api_and_the_cli(rooted: ServiceProcess, places: dict[str, Path]) -> None:
    job_id, manifest = _run(rooted, _job(places, "gzip-csv", format="csv", compression="gzip"))
    assert manifest.files[0].path.endswith(".csv.gz")
    answer = _preview(rooted, job_id)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [c["name"] for c in body["columns"]] == ["id", "p", "v"]
    assert sorted(body["rows"]) == [[1, "a", 0.5], [2, "a", 1.5], [3, "b", 2.5]]
    printed = _cli_head(rooted, job_id)
    assert printed.exit_code == 0 and printed.exception is None, printed.output
    assert "first 3 rows" in printed.output and "│ 3  │ b │ 2.5 │" in printed.output


def _garbage_of_the_same_size(part: Path) -> None:
    part.write_bytes(b"x" * part.stat().st_size)


def _emptied(part: Path) -> None:
    part.write_bytes(b"")


def _made_a_directory(part: Path) -> None:
    part.unlink()
    part.mkdir()


def _latin1_of_the_same_size(part: Path) -> None:
    text = part.read_bytes()
    header, _, rows = text.partition(b"\n")
    part.write_bytes(header + b"\n" + rows.replace(b"a", b"\xff", 1))  # one byte for one: the size stays


@pytest.mark.parametrize(
    ("fmt", "damage"),
    [("parquet", _garbage_of_the_same_size), ("parquet", _emptied), ("parquet", _made_a_directory), ("csv", _latin1_of_the_same_size)],
    ids=["not-parquet", "0-byte", "directory", "non-utf8-csv"],
)
def test_a_part_no_reader_takes_is_a_4xx_naming_it_and_one_cli_line(rooted: ServiceProcess, places: dict[str, Path], fmt: str, damage: Any) -> None:
    name = f"broken-{damage.__name__.strip('_')}"
    job_id, manifest = _run(rooted, _job(places, name, format=fmt))
    damage(Path(manifest.location) / manifest.files[0].path)
    error = _refused(_preview(rooted, job_id), (409,), manifest.files[0].path)
    assert error["code"] == "result_unreadable"
    printed = _cli_head(rooted, job_id)
    assert printed.exit_code == 1 and isinstance(printed.exception, SystemExit), printed.output
    assert "Traceback" not in printed.output and manifest.files[0].path in printed.output


# --- W2: partition values as sources read them ---------------------------------------------------


def test_partition_columns_are_decoded_as_sources_decode_them(rooted: ServiceProcess, places: dict[str, Path]) -> None:
    source = places["root"] / "in" / "odd_keys.parquet"
    texts = ["a/b", "k=v", "x%y", "ünï", None]
    pq.write_table(pa.table({"id": list(range(5)), "p": texts, "q": [1, 2, 3, None, 5]}), source)
    job_id, _ = _run(rooted, _job(places, "odd-keys", source=source, partition_on=["p", "q"]))
    body = _preview(rooted, job_id).json()
    names = [c["name"] for c in body["columns"]]
    got = {row[names.index("id")]: (row[names.index("p")], row[names.index("q")]) for row in body["rows"]}
    assert got == {0: ("a/b", 1), 1: ("k=v", 2), 2: ("x%y", 3), 3: ("ünï", None), 4: (None, 5)}


# --- W3: CSV values typed as the manifest records ---------------------------------------------------


def test_a_csv_sink_keeps_the_manifests_types(rooted: ServiceProcess, places: dict[str, Path]) -> None:
    source = places["root"] / "in" / "flags.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "flag": ["true", "false", "null", None], "n": [10, None, 30, 40]}), source)
    job_id, manifest = _run(rooted, _job(places, "flags-csv", source=source, format="csv"))
    body = _preview(rooted, job_id).json()
    assert [c["name"] for c in body["columns"]] == ["id", "flag", "n"]
    assert sorted(body["rows"]) == [[1, "true", 10], [2, "false", None], [3, "null", 30], [4, None, 40]]
    with rooted.client() as client:
        head = client.head(job_id, 10)
    assert [str(f.type) for f in head.schema] == [c.type for c in manifest.columns]  # the SDK's head(): the manifest's types
    # The file itself holds the text: the preview shows it, not a guess.
    assert b"3,null,30" in (Path(manifest.location) / manifest.files[0].path).read_bytes()


# --- H1: a wide result --------------------------------------------------------------------------------


def test_a_wide_preview_is_fast_and_leaves_the_event_loop_free(rooted: ServiceProcess, places: dict[str, Path]) -> None:
    source = places["root"] / "in" / "wide.parquet"
    pq.write_table(pa.table({f"c{i}": list(range(20)) for i in range(5000)}), source)
    job_id, _ = _run(rooted, _job(places, "wide", source=source))
    _preview(rooted, job_id, head=1)  # warm: the imports of the first read
    health: list[float] = []

    def probe() -> None:
        time.sleep(0.05)
        started = time.monotonic()
        httpx.get(f"{rooted.url}/healthz", timeout=60)
        health.append(time.monotonic() - started)

    prober = threading.Thread(target=probe)
    prober.start()
    answer = _preview(rooted, job_id, head=1)
    prober.join()
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["columns"]) == 5000 and answer.json()["rows"][0][:3] == [0, 0, 0]
    # A hang guard, not a speed test: on the event loop (quadratic in the columns) /healthz waited ~16 s; now milliseconds.
    assert health[0] < 10, f"/healthz waited {health[0]:.1f} s behind the preview"
