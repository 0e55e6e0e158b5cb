"""Schemathesis fuzzes the live service's OpenAPI: no 5xx, documented status codes, and every
response matching its schema. Bounded (10 examples per operation, fixed seed) to fit in CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import start_service


def test_openapi_fuzz_finds_no_server_errors_or_schema_mismatches(tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    if st is None:
        pytest.skip("schemathesis is not installed (pip install '.[test]')")
    # Data roots keep fuzzed paths inside this directory.
    service = start_service(tmp_path / "svc", extra_env={"SPILLWAY_ALLOWED_ROOTS": f'["{tmp_path}"]'})
    try:
        result = subprocess.run(
            [
                st, "run", f"{service.url}/openapi.json",
                "--max-examples", "10", "--seed", "20261129",
                "--checks", "not_a_server_error,status_code_conformance,response_schema_conformance",
                "--exclude-path-regex", "/events$",  # endless streams until a job ends
            ],
            capture_output=True, text=True, timeout=600,
        )
    finally:
        service.stop()
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "Server error" not in result.stdout
