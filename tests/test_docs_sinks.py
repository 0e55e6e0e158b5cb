"""Every YAML example in docs/sinks.md is a valid spec (or sink) as the CLI reads it.

The behaviour each example describes is tested against real files and a real S3 server in
tests/test_sink_modes.py and tests/test_s3.py; this keeps the page from drifting from the model.
"""

from __future__ import annotations

import re

import pytest
import yaml

from spillway.jobs.spec import JobSpec, SinkSpec
from spillway.service.documents import _Loader
from tests.conftest import ROOT

DOC = ROOT / "docs" / "sinks.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("text", BLOCKS, ids=[f"example{i}" for i in range(len(BLOCKS))])
def test_example_is_valid(text: str) -> None:
    document = yaml.load(text, Loader=_Loader)  # noqa: S506 - the CLI's safe YAML 1.2 loader
    if set(document) == {"sink"}:
        SinkSpec.model_validate(document["sink"])
    else:
        JobSpec.model_validate(document)


def test_a_wrong_example_would_fail() -> None:
    with pytest.raises(ValueError, match="row_group_size"):
        SinkSpec.model_validate({"format": "csv", "path": "/data/x", "row_group_size": 10})
