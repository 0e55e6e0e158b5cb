"""One import name: the wheel installs ``spillway`` (with ``jobs``, ``cluster``, ``service`` inside it),
never the repo's generic folder names, and ``python -m spillway`` / ``spillway --version`` work."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from spillway.service.launcher import REPO_ROOT as ROOT

#: The repo's top-level folders: imported only as ``spillway.<name>``.
FOLDERS = {"jobs", "cluster", "service"}


def _python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed]


def test_no_module_imports_a_folder_by_its_bare_name() -> None:
    """A bare ``import jobs`` works in the tree (it is on sys.path) but not from the wheel: none may be left."""
    bare = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            bare += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names if name.split(".")[0] in FOLDERS]
    assert not bare, "import these as spillway.<folder>: " + ", ".join(bare)


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(built_wheel: Path) -> None:
    names = zipfile.ZipFile(built_wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    dist_info = f"spillway-{version('spillway')}.dist-info"
    assert tops == {"spillway", dist_info}, tops
    assert {"spillway/jobs/spec.py", "spillway/cluster/factory.py", "spillway/service/cli.py", "spillway/service/ui/index.html"} <= set(names)
    meta = zipfile.ZipFile(built_wheel)
    assert meta.read(f"{dist_info}/top_level.txt").decode().split() == ["spillway"]
    assert "spillway = spillway.service.cli:main" in meta.read(f"{dist_info}/entry_points.txt").decode()


@pytest.mark.slow
def test_the_unpacked_wheel_runs_outside_the_tree(tmp_path: Path, built_wheel: Path) -> None:
    """Only the unpacked wheel on the path, run from elsewhere: the package, its version and the CLI work from it."""
    site = tmp_path / "site"
    zipfile.ZipFile(built_wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = "import spillway, spillway.jobs.spec as spec, sys; assert spec.__file__.startswith(sys.argv[1]), spec.__file__; print(spillway.__path__)"
    ran = subprocess.run([sys.executable, "-c", probe, str(site)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == repr([str(site / "spillway")]), "an installed package must not reach outside itself"
    cli = subprocess.run([sys.executable, "-m", "spillway", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert (cli.returncode, cli.stdout.strip()) == (0, f"spillway {version('spillway')}"), cli.stderr


def test_version_is_one_number_everywhere() -> None:
    import spillway

    assert spillway.__version__ == version("spillway")
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "spillway"]
    assert script.value == "spillway.service.cli:main"
    ran = subprocess.run([sys.executable, "-m", "spillway", "--version"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout.strip()) == (0, f"spillway {spillway.__version__}"), ran.stderr
