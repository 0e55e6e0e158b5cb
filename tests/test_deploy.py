"""The deploy files against the code they configure.

docker-compose.yml, deploy/Dockerfile, deploy/kubernetes/ and the deploy READMEs. There is
no Docker engine or Kubernetes here (nor in CI), so nothing is built or applied: the files
are parsed, and every SPILLWAY_* variable, every ``spillway`` and ``dask`` command line,
every port and health path in them is checked against the real Settings, the typer CLI, the
dask CLIs and the FastAPI routes. Renaming a setting, an option, a port or a route fails here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer
import yaml
from pydantic import BaseModel

from spillway.cluster.settings import DASHBOARD_PREFIX
from spillway.service.config import Settings
from tests.conftest import ROOT, ServiceProcess

COMPOSE_FILE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "kubernetes"
READMES = [DEPLOY / "README.md", K8S / "README.md"]

PREFIX = "SPILLWAY_"
API_PORT: int = Settings.model_fields["port"].default
DASHBOARD_PORT = 8787  # Dask's default dashboard port; every deploy variant keeps it
HEALTH_PATH = "/healthz"
SERVE_CMD = ["spillway", "serve", "--host", "0.0.0.0"]
DATA_ROOT = "/data"  # where every variant mounts the volume shared by the API and the workers

# `dask cuda worker` options of dask-cuda 26.10 (dask_cuda/cli.py), for machines without
# dask-cuda; where it is installed, its own click command parses the arguments instead.
DASK_CUDA_WORKER_OPTIONS = frozenset(
    [
        "--contact-address", "--cudf-spill-stats", "--dashboard", "--dashboard-address", "--dashboard-prefix",
        "--death-timeout", "--device-memory-limit", "--disable-cudf-spill", "--disable-infiniband", "--disable-nvlink",
        "--disable-rdmacm", "--disable-tcp-over-ucx", "--enable-cudf-spill", "--enable-infiniband", "--enable-nvlink",
        "--enable-rdmacm", "--enable-tcp-over-ucx", "--host", "--interface", "--listen-address", "--local-directory",
        "--memory-limit", "--multiprocessing-method", "--name", "--no-dashboard", "--no-rmm-async",
        "--no-rmm-managed-memory", "--no-rmm-track-allocations", "--nthreads", "--pid-file", "--pre-import", "--preload",
        "--protocol", "--resources", "--rmm-async", "--rmm-log-directory", "--rmm-managed-memory",
        "--rmm-maximum-pool-size", "--rmm-pool-size", "--rmm-release-threshold", "--rmm-track-allocations",
        "--scheduler-file", "--set-rmm-allocator-for-libs", "--tls-ca-file", "--tls-cert", "--tls-key", "--worker-class",
        "--worker-port",
    ]
)


# ---------------------------------------------------------------------------------------
# Reading the files
# ---------------------------------------------------------------------------------------


@dataclass
class Stage:
    """One ``FROM ... AS name`` stage of the Dockerfile: its base and its instructions in order."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        """Every ENV of the stage (``ENV A=1 B='x y'``), later ones winning."""
        values: dict[str, str] = {}
        for rest in self.all("ENV"):
            for token in shlex.split(rest):
                key, _, value = token.partition("=")
                values[key] = value
        return values

    def cmd(self) -> list[str]:
        """The stage's CMD, which must be in exec (JSON) form."""
        return list(json.loads(self.all("CMD")[-1]))

    def healthcheck(self) -> list[str]:
        """The HEALTHCHECK command, in exec form after its options."""
        _, _, command = self.all("HEALTHCHECK")[-1].partition(" CMD ")
        return list(json.loads(command))

    def user(self) -> str:
        return self.all("USER")[-1]


def dockerfile_stages() -> dict[str, Stage]:
    """The Dockerfile's stages by name, with global ARG defaults substituted into FROM."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        text = line.strip()
        if text.startswith("#") or (not text and not pending):
            continue  # comments, also inside a continued instruction, as Docker drops them
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        keyword, _, rest = (pending + text).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for keyword, rest in instructions:
        if keyword == "FROM":
            parts = re.split(r"\s+as\s+", rest, flags=re.IGNORECASE)
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), parts[0])
            name = parts[1] if len(parts) > 1 else f"stage{len(stages)}"
            current = stages[name] = Stage(name, image)
        elif current is None and keyword == "ARG":
            key, _, default = rest.partition("=")
            args[key] = default
        elif current is not None:
            current.instructions.append((keyword, rest))
    return stages


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


_INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?::?-(?P<default>[^}]*))?\}")


def interpolate(value: Any) -> str:
    """Compose's ``${VAR:-default}`` with nothing set in the shell: what a bare ``docker compose up`` uses."""
    return _INTERPOLATION.sub(lambda m: m["default"] or "", str(value))


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): interpolate(v) for k, v in env.items()}


def compose_argv(service: dict[str, Any]) -> list[str]:
    """What the container runs: its command, or the CMD of the image's build target."""
    command = service.get("command")
    if command is None:
        return dockerfile_stages()[service["build"]["target"]].cmd()
    argv = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    entrypoint = service.get("entrypoint")
    if entrypoint:
        argv = (shlex.split(entrypoint) if isinstance(entrypoint, str) else [str(c) for c in entrypoint]) + argv
    return argv


def container_env(service: dict[str, Any]) -> dict[str, str]:
    """A compose container's environment: the image's ENV under the compose file's."""
    image_env = dockerfile_stages()[service["build"]["target"]].env() if "build" in service else {}
    return {**image_env, **compose_env(service)}


@dataclass(frozen=True)
class Port:
    """One entry of a compose service's ``ports``."""

    host_ip: str
    host: int
    container: int


def compose_ports(service: dict[str, Any]) -> list[Port]:
    ports = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.append(Port(entry.get("host_ip", ""), int(entry.get("published", entry["target"])), int(entry["target"])))
            continue
        parts = str(entry).split("/")[0].split(":")
        container = int(parts[-1])
        host = int(parts[-2]) if len(parts) > 1 else container
        ports.append(Port(parts[0] if len(parts) == 3 else "", host, container))
    return ports


def k8s_objects() -> list[dict[str, Any]]:
    """Every object kustomization.yaml applies, in its order."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        objects += [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]
    return objects


def k8s(kind: str) -> list[dict[str, Any]]:
    return [o for o in k8s_objects() if o["kind"] == kind]


def one(kind: str) -> dict[str, Any]:
    found = k8s(kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) for the Deployment and the DaskCluster's scheduler and workers."""
    for deployment in k8s("Deployment"):
        yield f"Deployment {deployment['metadata']['name']}", deployment["spec"]["template"]["spec"]
    for cluster in k8s("DaskCluster"):
        yield "DaskCluster scheduler", cluster["spec"]["scheduler"]["spec"]
        yield "DaskCluster worker", cluster["spec"]["worker"]["spec"]


def k8s_argv(container: dict[str, Any]) -> list[str]:
    """What a container runs: command + args, or args under the image entrypoint (which execs them)."""
    return [str(a) for a in container.get("command", []) + container.get("args", [])]


def k8s_container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment: image ENV, then envFrom ConfigMaps/Secrets, then env."""
    env = dockerfile_stages()["gpu"].env()
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(_by_name("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
        if "secretRef" in source:
            env.update(_by_name("Secret", source["secretRef"]["name"]).get("stringData", {}))
    env.update({e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e})
    return env


def _by_name(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in k8s(kind) if o["metadata"]["name"] == name]
    assert found, f"no {kind} named {name}"
    return found[0]


def readme_commands() -> list[tuple[str, list[str], dict[str, str]]]:
    """(where, argv, leading VAR=value assignments) of every command line in the READMEs' code blocks."""
    commands = []
    for readme in READMES:
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", readme.read_text(), flags=re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                assignments: dict[str, str] = {}
                while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
                    key, _, value = words.pop(0).partition("=")
                    assignments[key] = value
                if words or assignments:
                    commands.append((readme.name, words, assignments))
    return commands


# ---------------------------------------------------------------------------------------
# Checking against the code
# ---------------------------------------------------------------------------------------


def setting_field(name: str) -> Any:
    """The pydantic field a SPILLWAY_* variable sets (case-insensitive, nested with __), or None."""
    if not name.upper().startswith(PREFIX):
        return None
    model: type[BaseModel] = Settings
    parts = name[len(PREFIX) :].lower().split("__")
    for i, part in enumerate(parts):
        info = model.model_fields.get(part)
        if info is None:
            return None
        if i < len(parts) - 1:
            if not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)):
                return None
            model = info.annotation
    return info


def setting_value(settings: Settings, name: str) -> Any:
    value: Any = settings
    for part in name[len(PREFIX) :].lower().split("__"):
        value = getattr(value, part)
    return value


def cli_envvars() -> set[str]:
    """Environment variables the CLI itself reads (SPILLWAY_URL, SPILLWAY_TOKEN): not settings."""
    group = typer.main.get_command(_cli_app())
    params = list(group.params) + [p for command in group.commands.values() for p in command.params]
    names: set[str] = set()
    for param in params:
        envvar = getattr(param, "envvar", None)
        names.update([envvar] if isinstance(envvar, str) else envvar or [])
    return names


def _cli_app() -> typer.Typer:
    from spillway.service.cli import app

    return app


def check_spillway_argv(argv: list[str]) -> str:
    """Parse a ``spillway ...`` command line with the CLI's own click commands; returns the subcommand."""
    group = typer.main.get_command(_cli_app())
    args = list(argv[1:])
    group_options = {opt: p for p in group.params for opt in getattr(p, "opts", [])}
    while args and args[0].startswith("-"):  # global options such as --token come first
        word = args.pop(0)
        global_option = group_options.get(word.split("=")[0])
        assert global_option is not None, f"{argv}: unknown global option {word}"
        if not global_option.is_flag and "=" not in word:
            args.pop(0)
    assert args, f"{argv}: no subcommand"
    name, *rest = args
    command = group.commands.get(name)  # type: ignore[attr-defined]
    assert command is not None, f"{argv}: `spillway {name}` is not a command; the CLI has {sorted(group.commands)}"  # type: ignore[attr-defined]
    try:
        command.make_context(f"spillway {name}", rest)
    except Exception as exc:  # click's usage errors, said with the command line
        raise AssertionError(f"{argv}: {exc}") from exc
    return name


def check_dask_argv(argv: list[str]) -> str:
    """Parse a ``dask ...`` command line with the dask CLI's click commands; returns e.g. 'cuda worker'."""
    if argv[1] == "scheduler":
        from distributed.cli.dask_scheduler import main as command
    elif argv[1] == "worker":
        from distributed.cli.dask_worker import main as command
    elif argv[1:3] == ["cuda", "worker"]:
        try:
            from dask_cuda.cli import worker as command
        except ImportError:
            unknown = {a.split("=")[0] for a in argv[3:] if a.startswith("--")} - DASK_CUDA_WORKER_OPTIONS
            assert not unknown, f"{argv}: dask-cuda 26.10 has no option {sorted(unknown)}"
            return "cuda worker"
    else:
        raise AssertionError(f"{argv}: not a dask command this project uses")
    words = 3 if argv[1] == "cuda" else 2
    try:
        command.make_context(" ".join(argv[:words]), argv[words:])
    except Exception as exc:  # click's usage errors, said with the command line
        raise AssertionError(f"{argv}: {exc}") from exc
    return " ".join(argv[1:words])


def option(argv: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in argv."""
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def positional_after(argv: list[str], words: int) -> str:
    """The first argument after the command words (the scheduler address of a worker)."""
    return argv[words]


def address_port(address: str) -> int:
    """The port of 'host:port', ':port', 'tcp://host:port' or a bare port."""
    return int(address.rsplit(":", 1)[-1])


def all_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every command the deploy files and READMEs run."""
    found = [(f"Dockerfile {name}", stage.cmd()) for name, stage in dockerfile_stages().items()]
    found += [(f"compose {name}", compose_argv(svc)) for name, svc in compose()["services"].items() if "build" in svc]
    found += [(where, k8s_argv(c)) for where, spec in pod_specs() for c in spec["containers"]]
    found += [(where, embedded) for where, argv, _ in readme_commands() for embedded in _embedded_commands(argv)]
    return found


def _embedded_commands(argv: list[str]) -> list[list[str]]:
    """The spillway/dask command lines in a README line, also after `docker compose exec svc` or `kubectl exec ... --`."""
    commands = typer.main.get_command(_cli_app()).commands  # type: ignore[attr-defined]
    found = []
    for i, word in enumerate(argv):
        following = argv[i + 1] if i + 1 < len(argv) else None
        if (word == "spillway" and following in commands) or (word == "dask" and following in ("scheduler", "worker", "cuda")):
            found.append(argv[i:])
    return found


def environments() -> dict[str, dict[str, str]]:
    """Every place that sets SPILLWAY_* variables, with the full environment a process there sees."""
    envs = {f"Dockerfile {name}": stage.env() for name, stage in dockerfile_stages().items()}
    envs |= {f"compose {name}": container_env(svc) for name, svc in compose()["services"].items() if "build" in svc}
    envs |= {f"{where} {c['name']}": k8s_container_env(c) for where, spec in pod_specs() for c in spec["containers"]}
    envs |= {f"ConfigMap {o['metadata']['name']}": dict(o.get("data", {})) for o in k8s("ConfigMap")}
    envs |= {f"Secret {o['metadata']['name']}": dict(o.get("stringData", {})) for o in k8s("Secret")}
    return {where: env for where, env in envs.items() if any(k.upper().startswith(PREFIX) for k in env)}


def _runs(argv: list[str], *words: str) -> bool:
    return argv[: len(words)] == list(words)


# ---------------------------------------------------------------------------------------
# The Dockerfile
# ---------------------------------------------------------------------------------------


def test_dockerfile_has_a_gpu_and_a_cpu_target() -> None:
    stages = dockerfile_stages()
    assert {"gpu", "cpu"} <= set(stages)
    gpu, cpu = stages["gpu"], stages["cpu"]
    assert gpu.base.startswith("nvcr.io/nvidia/rapidsai/base:") and gpu.base.endswith(":26.10-cuda13-py3.12"), gpu.base
    assert cpu.base == "python:3.12-slim"
    assert "R580" in DOCKERFILE.read_text(), "say which driver CUDA 13 needs"


# ids not spelled "gpu": conftest skips every test with a "gpu" keyword on machines without GPUs.
@pytest.mark.parametrize("target", ["gpu", "cpu"], ids=["gpu-target", "cpu-target"])
def test_each_target_serves_as_non_root_with_a_healthcheck(target: str) -> None:
    stage = dockerfile_stages()[target]
    user = stage.user().split(":")[0]
    assert user not in ("root", "0", ""), f"{target} runs as {user}"
    assert stage.cmd() == SERVE_CMD
    check_spillway_argv(stage.cmd())
    health = " ".join(stage.healthcheck())
    assert HEALTH_PATH in health and f"'SPILLWAY_PORT', '{API_PORT}'" in health
    exposed = {int(p.split("/")[0]) for rest in stage.all("EXPOSE") for p in rest.split()}
    # The API serves the local cluster's dashboard behind its tokens (/dashboard/), which reaches
    # it on the container's loopback: the dashboard's own, unauthenticated port stays inside.
    assert API_PORT in exposed and DASHBOARD_PORT not in exposed
    dashboard = stage.env()["SPILLWAY_CLUSTER__DASHBOARD_ADDRESS"]
    assert dashboard.startswith("127.0.0.1:") and address_port(dashboard) == DASHBOARD_PORT
    # Settings only from the environment: no config file is copied in or pointed at.
    assert not [c for c in stage.all("COPY") if re.search(r"\.(env|ya?ml|toml|ini|json)\b", c) and "pyproject.toml" not in c]


def test_gpu_target_sees_the_gpus_and_keeps_the_base_images_rapids() -> None:
    gpu = dockerfile_stages()["gpu"]
    env = gpu.env()
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    installs = [run for run in gpu.all("RUN") if "pip install" in run]
    assert installs and all("[gpu" not in run and "--constraint" in run for run in installs), installs
    # ...but the build checks that the base provides what the gpu extra would have installed.
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    modules = {re.split(r"[=<>!~ ]", req)[0].removesuffix("-cu13").replace("-", "_") for req in extra}
    modules = {"pynvml" if m == "nvidia_ml_py" else m for m in modules}
    checked = " ".join(installs)
    assert all(re.search(rf"\b{m}\b", checked) for m in modules), f"import-check every gpu-extra module: {sorted(modules)}"
    cpu_installs = [run for run in dockerfile_stages()["cpu"].all("RUN") if "pip install" in run]
    assert any(re.search(r"pip install (--[\w-]+ )*'?\.(\[[\w,]+\])?'?", run) for run in cpu_installs), cpu_installs


# ---------------------------------------------------------------------------------------
# The lock: deploy/requirements.lock pins what the images install, so two builds are the same
# ---------------------------------------------------------------------------------------

LOCK = DEPLOY / "requirements.lock"
IMAGE_EXTRAS = ("postgres", "oidc")  # the extras both images install besides the runtime


def lock_pins() -> dict[str, tuple[str, list[str]]]:
    """The lock's requirements by canonical name: (version, sha256 hashes), continuation lines joined."""
    from packaging.utils import canonicalize_name

    pins: dict[str, tuple[str, list[str]]] = {}
    for entry in re.sub(r"\\\n\s*", " ", LOCK.read_text()).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][\w.-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)", entry)
        assert match, f"deploy/requirements.lock: not a hashed pin: {entry!r}"
        pins[canonicalize_name(match[1])] = (match[2], re.findall(r"sha256:([0-9a-f]{64})", match[3]))
    return pins


def _is_rapids(requirement: str) -> bool:
    """Whether a gpu-extra requirement is one the RAPIDS base image brings (CUDA wheels, dask-cuda, NVML)."""
    name = re.split(r"[=<>!~\[ ;]", requirement, maxsplit=1)[0]
    return name.endswith("-cu13") or name in {"dask-cuda", "nvidia-ml-py"}


def _pip_installs(stage: Stage) -> list[str]:
    """Each ``pip install`` command of a stage's RUN lines (split at ``&&``)."""
    return [part.strip() for run in stage.all("RUN") for part in run.split("&&") if "pip install" in part]


def test_the_cpu_image_installs_only_the_lock_checked_against_its_hashes() -> None:
    cpu = dockerfile_stages()["cpu"]
    assert any("deploy/requirements.lock" in c.split() for c in cpu.all("COPY")), "the lock is copied into the build"
    installs = _pip_installs(cpu)
    from_lock = [i for i in installs if "--require-hashes" in i.split() and "deploy/requirements.lock" in i.split()]
    assert from_lock, f"the cpu image installs deploy/requirements.lock with --require-hashes: {installs}"
    for command in installs:
        if command not in from_lock:
            # Anything else is the project itself, adding no package the lock did not pin, and
            # built with the lock's setuptools rather than whatever an isolated build env resolves.
            assert {"--no-deps", "--no-build-isolation"} <= set(command.split()), command
    assert any(r.strip().startswith("pip check") or " pip check" in r for r in cpu.all("RUN")), "pip check proves the lock is complete"


def test_the_gpu_image_pins_what_pip_adds_to_rapids_at_the_locks_versions() -> None:
    gpu = dockerfile_stages()["gpu"]
    copied = " ".join(gpu.all("COPY"))
    assert "deploy/requirements.lock" in copied and "deploy/merge_constraints.py" in copied
    runs = " ".join(gpu.all("RUN"))
    assert re.search(r"python deploy/merge_constraints\.py \S+ deploy/requirements\.lock > (\S+)", runs), runs
    constraints = re.search(r"deploy/requirements\.lock > (\S+)", runs)[1]
    for command in _pip_installs(gpu):
        assert f"--constraint {constraints}" in command and f"PIP_CONSTRAINT={constraints}" in command, command
    # What the gpu extra needs beyond RAPIDS is installed by name (the extra itself is not: see above).
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    for requirement in (r for r in extra if not _is_rapids(r)):
        name = re.split(r"[=<>!~\[ ;]", requirement, maxsplit=1)[0]
        assert any(re.search(rf"\s{re.escape(name)}(\s|$)", c) for c in _pip_installs(gpu)), f"the gpu image must install {name}"


@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_both_images_install_the_oidc_and_postgres_extras(target: str) -> None:
    stage = dockerfile_stages()[target]
    runs = " ".join(stage.all("RUN"))
    if target == "gpu":
        assert re.search(r"'\.\[postgres,oidc\]'", runs), runs
    assert re.search(r"import [\w., ]*\bjwt\b", runs) and re.search(r"import [\w., ]*\bpsycopg\b", runs), "the build imports both"
    pins = lock_pins()
    assert {"pyjwt", "cryptography", "psycopg", "psycopg-binary"} <= set(pins), "the lock holds both extras (PyJWT[crypto], psycopg[binary])"


def test_the_lock_pins_every_dependency_within_pyprojects_ranges() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    wanted = [*project["dependencies"], *(r for extra in IMAGE_EXTRAS for r in project["optional-dependencies"][extra])]
    wanted += pyproject["build-system"]["requires"]  # the project is built with the lock's setuptools
    # The gpu image adds to its RAPIDS base what the gpu extra asks for beyond RAPIDS itself.
    wanted += [r for r in project["optional-dependencies"]["gpu"] if not _is_rapids(r)]
    pins = lock_pins()
    assert len(pins) >= len(project["dependencies"])
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{text}: not in deploy/requirements.lock; run `make lock`"
        version = pins[name][0]
        assert requirement.specifier.contains(version, prereleases=True), f"the lock pins {name}=={version}, outside pyproject's {text!r}: run `make lock`"
    for name, (version, hashes) in pins.items():
        assert hashes, f"{name}=={version} has no hash: --require-hashes would refuse the lock"


def test_merge_constraints_keeps_the_images_packages_and_pins_the_rest(tmp_path: Any) -> None:
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("dask==2026.7.1\nPyJWT==2.8.0\ncudf-cu13==26.10.0\n")  # as `pip list --format=freeze` writes them
    merged = subprocess.run(
        [sys.executable, str(DEPLOY / "merge_constraints.py"), str(freeze), str(LOCK)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    constraints = dict(line.split("==") for line in merged)
    assert constraints["dask"] == "2026.7.1" and constraints["pyjwt"] == "2.8.0" and constraints["cudf-cu13"] == "26.10.0", "the image wins"
    pins = lock_pins()
    assert constraints["fastapi"] == pins["fastapi"][0] and constraints["websockets"] == pins["websockets"][0], "the lock pins the rest"
    assert set(constraints) == set(pins) | {"cudf-cu13"} and not any("hash" in line for line in merged)


# ---------------------------------------------------------------------------------------
# Settings: every SPILLWAY_* variable anywhere is a real setting, and every set of them builds
# ---------------------------------------------------------------------------------------


def test_every_spillway_variable_is_a_setting() -> None:
    envs = environments()
    names = {name for env in envs.values() for name in env if name.upper().startswith(PREFIX)}
    # The collectors found what they must (a broken parser would make the rest vacuous).
    assert {"SPILLWAY_CLUSTER__SCHEDULER_ADDRESS", "SPILLWAY_DATABASE_URL", "SPILLWAY_ALLOWED_ROOTS"} <= names
    assert any(w.startswith("compose ") for w in envs) and any(w.startswith("ConfigMap ") for w in envs)
    unknown = sorted(f"{where}: {name}" for where, env in envs.items() for name in env if name.upper().startswith(PREFIX) and setting_field(name) is None)
    # pydantic-settings silently ignores an unknown top-level SPILLWAY_* variable: check names here.
    assert not unknown, f"not settings (service/config.py, cluster/settings.py): {unknown}"
    readme_names = {n for _, _, assignments in readme_commands() for n in assignments if n.upper().startswith(PREFIX)}
    readme_names |= {n for readme in READMES for n in re.findall(r"\bSPILLWAY_[A-Z0-9_]+\b", readme.read_text())}
    assert not sorted(n for n in readme_names if setting_field(n) is None and n not in cli_envvars())


@pytest.mark.parametrize("where", sorted(environments()))
def test_each_environment_builds_valid_settings(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = environments()[where]
    for name in list(os.environ):
        if name.upper().startswith(PREFIX):
            monkeypatch.delenv(name)  # only the deploy file's variables count
    for name, value in env.items():
        if name.upper().startswith(PREFIX):
            monkeypatch.setenv(name, value)
    settings = Settings()  # raises on any invalid value
    for name, value in env.items():
        if not name.upper().startswith(PREFIX):
            continue
        actual = setting_value(settings, name)
        if isinstance(actual, bool):
            expected: Any = value.lower() in ("1", "true", "yes", "on")
        elif isinstance(actual, list):
            expected = json.loads(value)
        else:
            expected, actual = value, str(actual)
        assert actual == expected, f"{where}: {name}={value!r} did not reach the settings ({actual!r})"


# ---------------------------------------------------------------------------------------
# Commands: every `spillway ...` and `dask ...` parses with the real CLIs
# ---------------------------------------------------------------------------------------


def test_every_command_parses_with_the_real_cli() -> None:
    checked: dict[str, set[str]] = {}
    for where, argv in all_commands():
        if argv[:1] == ["spillway"]:
            checked.setdefault(where.split()[0], set()).add("spillway " + check_spillway_argv(argv))
        elif argv[:1] == ["dask"]:
            checked.setdefault(where.split()[0], set()).add("dask " + check_dask_argv(argv))
    assert "spillway serve" in checked["Dockerfile"] and "spillway serve" in checked["Deployment"]
    assert {"spillway serve", "dask scheduler", "dask cuda worker"} <= checked["compose"]
    assert {"dask scheduler", "dask cuda worker"} <= checked["DaskCluster"]
    assert {"spillway serve", "dask scheduler", "dask cuda worker"} <= checked["README.md"]


def test_workers_use_ucx_and_a_device_memory_limit() -> None:
    workers = [argv for _, argv in all_commands() if _runs(argv, "dask", "cuda", "worker")]
    assert len(workers) >= 3  # compose (2), the DaskCluster, the README recipe
    for argv in workers:
        assert option(argv, "--protocol") == "ucx", argv
        assert option(argv, "--device-memory-limit"), argv
        assert positional_after(argv, 3).startswith("ucx://"), f"{argv}: the scheduler must be addressed over ucx"
    for _, argv in all_commands():
        if _runs(argv, "dask", "scheduler"):
            assert option(argv, "--protocol") == "ucx", argv


# ---------------------------------------------------------------------------------------
# docker-compose.yml
# ---------------------------------------------------------------------------------------


def _api_services() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose()["services"].items() if "build" in s and _runs(compose_argv(s), "spillway", "serve")}


def _compose_scheduler(services: dict[str, dict[str, Any]], host: str) -> dict[str, Any]:
    assert host in services and _runs(compose_argv(services[host]), "dask", "scheduler"), f"{host} is not a `dask scheduler` service"
    return services[host]


def _gpu_reservation(service: dict[str, Any]) -> list[dict[str, Any]]:
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    return [d for d in devices if d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])]


def test_compose_api_ports_and_healthcheck() -> None:
    apis = _api_services()
    assert {"spillway", "spillway-multinode", "spillway-postgres"} <= set(apis)
    for name, service in apis.items():
        env = container_env(service)
        port = int(env.get("SPILLWAY_PORT", API_PORT))
        published = {p.container: p for p in compose_ports(service)}
        assert port in published, f"{name}: the API's port {port} is not published"
        assert published[port].host_ip == "127.0.0.1", f"{name}: publish the API on loopback only (deploy/README.md)"
        test = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{port}{HEALTH_PATH}" in test, f"{name}: the healthcheck must hit {HEALTH_PATH} on {port}"
        assert _gpu_reservation(service), f"{name}: reserve GPUs (driver nvidia, capabilities [gpu])"
        assert any(v.endswith(":" + DATA_ROOT) for v in service["volumes"]) and DATA_ROOT in json.loads(env["SPILLWAY_ALLOWED_ROOTS"])


def test_compose_dashboard_is_reached_through_the_api() -> None:
    services = compose()["services"]
    for name, service in _api_services().items():
        env = container_env(service)
        assert env.get("SPILLWAY_CLUSTER__DASHBOARD_PROXY", "true").lower() != "false", f"{name}: the dashboard goes through the API's tokens"
        address = env.get("SPILLWAY_CLUSTER__SCHEDULER_ADDRESS")
        if address:  # joined: the dashboard is the scheduler's, under the proxy's prefix
            scheduler = _compose_scheduler(services, urlsplit(address).hostname or "")
            argv = compose_argv(scheduler)
            assert address_port(option(argv, "--dashboard-address") or "") == DASHBOARD_PORT
            assert option(argv, "--dashboard-prefix") == DASHBOARD_PREFIX
            # Published on the host's loopback for the proxy-off case: the link then uses that port.
            published = {p.container: p.host for p in compose_ports(scheduler)}
            public = urlsplit(env["SPILLWAY_CLUSTER__DASHBOARD_PUBLIC_URL"])
            assert public.port == published[DASHBOARD_PORT] and public.path == DASHBOARD_PREFIX, f"{name}: the proxy-off link"
        else:  # its own local cluster: the API reaches it on the container's loopback, and only the API is published
            dashboard = env["SPILLWAY_CLUSTER__DASHBOARD_ADDRESS"]
            assert dashboard.startswith("127.0.0.1:") and address_port(dashboard) == DASHBOARD_PORT, name
            assert DASHBOARD_PORT not in {p.container for p in compose_ports(service)}, f"{name}: publish the API, not the dashboard's own port"


def test_compose_multinode_profile() -> None:
    services = compose()["services"]
    multinode = {n: s for n, s in services.items() if "multinode" in s.get("profiles", [])}
    api = [s for s in multinode.values() if s in _api_services().values()]
    assert len(api) == 1
    address = compose_env(api[0])["SPILLWAY_CLUSTER__SCHEDULER_ADDRESS"]
    host = urlsplit(address).hostname or ""
    scheduler = _compose_scheduler(multinode, host)
    sched_argv = compose_argv(scheduler)
    assert option(sched_argv, "--dashboard-prefix") == DASHBOARD_PREFIX, "the API proxies the dashboard at its own prefix"
    assert f":{DASHBOARD_PORT}{DASHBOARD_PREFIX}/health" in " ".join(scheduler["healthcheck"]["test"])
    assert urlsplit(address).scheme == option(sched_argv, "--protocol")
    assert urlsplit(address).port == int(option(sched_argv, "--port") or 8786)
    workers = {n: s for n, s in multinode.items() if _runs(compose_argv(s), "dask", "cuda", "worker")}
    assert len(workers) >= 2
    device_ids = []
    for name, worker in workers.items():
        argv = compose_argv(worker)
        assert positional_after(argv, 3) == address, f"{name}: workers and the API must use the same scheduler address"
        reservation = _gpu_reservation(worker)
        assert reservation, f"{name}: reserve a GPU"
        device_ids += [tuple(d.get("device_ids", [])) for d in reservation]
        assert f"spillway-data:{DATA_ROOT}" in worker["volumes"], f"{name}: workers write the sinks: mount the data volume"
    assert len(set(device_ids)) == len(device_ids), "each worker container gets its own GPU"
    # Compose only starts a dependency whose profile is enabled: keep them in the same profile.
    for name, service in multinode.items():
        for dependency in service.get("depends_on", {}):
            assert "multinode" in services[dependency].get("profiles", ["multinode"]), f"{name} -> {dependency}"


def test_compose_postgres_profile() -> None:
    services = compose()["services"]
    postgres = {n: s for n, s in services.items() if "postgres" in s.get("profiles", [])}
    api = [s for s in postgres.values() if s in _api_services().values()]
    assert len(api) == 1
    url = urlsplit(compose_env(api[0])["SPILLWAY_DATABASE_URL"])
    assert url.scheme == "postgresql+psycopg"
    database = postgres[url.hostname or ""]
    assert database["image"].startswith("postgres:")
    db_env = compose_env(database)
    assert (url.username, url.password, url.path.lstrip("/")) == (db_env["POSTGRES_USER"], db_env["POSTGRES_PASSWORD"], db_env["POSTGRES_DB"])
    assert url.port == 5432
    assert api[0]["depends_on"][url.hostname]["condition"] == "service_healthy"


def test_compose_volumes_are_declared() -> None:
    spec = compose()
    declared = set(spec.get("volumes", {}))
    for name, service in spec["services"].items():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if not source.startswith((".", "/", "~")):
                assert source in declared, f"{name}: volume {source} is not declared"
    store = [v for v in spec["services"]["spillway"]["volumes"] if v.endswith(":/var/lib/spillway")]
    assert store, "the SQLite store needs a volume"
    assert compose_env(spec["services"]["spillway"])["SPILLWAY_DATABASE_URL"].startswith("sqlite:////var/lib/spillway/")


# ---------------------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------------------


def test_k8s_manifests_hang_together() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk, "kustomization.yaml applies every manifest"
    namespace = one("Namespace")["metadata"]["name"]
    assert all(o["metadata"].get("namespace") == namespace for o in k8s_objects() if o["kind"] != "Namespace")
    deployment, service = one("Deployment"), one("Service")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    claims = {o["metadata"]["name"] for o in k8s("PersistentVolumeClaim")}
    for where, spec in pod_specs():
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, where
    assert one("PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"], "the API and every worker mount it"
    url = one("Secret")["stringData"]["SPILLWAY_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://")


def _container_port(container: dict[str, Any], ref: int | str) -> int:
    """A port reference (number or name) resolved against a container's ports."""
    if isinstance(ref, int):
        assert any(p["containerPort"] == ref for p in container["ports"]), ref
        return ref
    named = [p["containerPort"] for p in container["ports"] if p.get("name") == ref]
    assert named, f"no container port named {ref}"
    return named[0]


def test_k8s_api_ports_and_probes() -> None:
    container = one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert k8s_argv(container) == SERVE_CMD
    port = int(k8s_container_env(container).get("SPILLWAY_PORT", API_PORT))
    assert [p["containerPort"] for p in container["ports"]] == [port]
    service_port = one("Service")["spec"]["ports"][0]
    assert _container_port(container, service_port["targetPort"]) == port
    for probe in ("readinessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == HEALTH_PATH and _container_port(container, get["port"]) == port, probe
    assert _container_port(container, container["livenessProbe"]["tcpSocket"]["port"]) == port
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert DATA_ROOT in mounts and DATA_ROOT in json.loads(k8s_container_env(container)["SPILLWAY_ALLOWED_ROOTS"])


def test_k8s_daskcluster_has_gpu_workers_and_the_api_points_at_its_scheduler() -> None:
    cluster = one("DaskCluster")
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1"
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    scheduler = cluster["spec"]["scheduler"]
    sched_container = scheduler["spec"]["containers"][0]
    sched_argv = k8s_argv(sched_container)
    comm_port = int(option(sched_argv, "--port") or 8786)
    assert _container_port(sched_container, "tcp-comm") == comm_port  # the operator finds the scheduler by these names
    assert _container_port(sched_container, "http-dashboard") == address_port(option(sched_argv, "--dashboard-address") or "") == DASHBOARD_PORT
    service_ports = {p["port"]: _container_port(sched_container, p["targetPort"]) for p in scheduler["service"]["ports"]}
    assert service_ports[DASHBOARD_PORT] == DASHBOARD_PORT
    comm_service_port = next(p for p, target in service_ports.items() if target == comm_port)
    assert scheduler["service"]["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
    get = sched_container["readinessProbe"]["httpGet"]
    # The API proxies the dashboard at its own prefix, so the scheduler serves there, /health included.
    assert option(sched_argv, "--dashboard-prefix") == DASHBOARD_PREFIX
    assert _container_port(sched_container, get["port"]) == DASHBOARD_PORT and get["path"] == f"{DASHBOARD_PREFIX}/health"

    # The operator names the scheduler Service "<cluster>-scheduler"; the API and workers use it.
    expected = f"{option(sched_argv, '--protocol')}://{name}-scheduler.{namespace}.svc.cluster.local:{comm_service_port}"
    api = one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert k8s_container_env(api)["SPILLWAY_CLUSTER__SCHEDULER_ADDRESS"] == expected
    worker = cluster["spec"]["worker"]
    assert worker["replicas"] >= 1
    for container in worker["spec"]["containers"]:
        argv = k8s_argv(container)
        assert _runs(argv, "dask", "cuda", "worker") and positional_after(argv, 3) == expected
        assert option(argv, "--name") == "$(DASK_WORKER_NAME)", "the operator retires workers by name"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert DATA_ROOT in {m["mountPath"] for m in container["volumeMounts"]}, "workers write the sinks"


# ---------------------------------------------------------------------------------------
# The routes and the healthchecks themselves
# ---------------------------------------------------------------------------------------


def test_health_path_is_a_route_of_the_app() -> None:
    from spillway.service.app import create_app

    app = create_app(Settings())  # routes only: the lifespan (store, cluster) is not started
    # The routing table resolves the health route to this path, and it is a GET. (FastAPI 0.165
    # keeps included routers nested in app.routes, so ask the router rather than list them.)
    assert app.url_path_for("healthz") == HEALTH_PATH
    assert "get" in app.openapi()["paths"][HEALTH_PATH]


def test_healthcheck_commands_work_against_a_live_service(service: ServiceProcess) -> None:
    port = service.url.rsplit(":", 1)[1]
    checks = {f"Dockerfile {name}": stage.healthcheck() for name, stage in dockerfile_stages().items()}
    compose_check = compose()["services"]["spillway"]["healthcheck"]["test"][1:]  # after "CMD"
    checks["compose"] = [arg.replace(f":{API_PORT}/", f":{port}/") for arg in compose_check]
    for where, argv in checks.items():
        assert argv[0] == "python"
        run = [sys.executable, *argv[1:]]
        ok = subprocess.run(run, env={**os.environ, "SPILLWAY_PORT": port}, capture_output=True, text=True, timeout=30, check=False)
        assert ok.returncode == 0, f"{where}: {ok.stderr}"
    # And they do fail when nothing answers, or the container would always look healthy.
    down = subprocess.run([sys.executable, *checks["Dockerfile gpu"][1:]], env={**os.environ, "SPILLWAY_PORT": "1"}, capture_output=True, timeout=30, check=False)
    assert down.returncode != 0


def test_readmes_name_only_existing_deploy_files() -> None:
    for readme in READMES:
        text = readme.read_text()
        # Files (deploy/...ext, deploy/Dockerfile) and the kubernetes folder; not `deploy/spillway` in kubectl lines.
        for path in set(re.findall(r"\bdeploy/(?:[\w-]+/)*(?:[\w-]+\.\w+|Dockerfile|kubernetes)\b", text)):
            assert (ROOT / path).exists(), f"{readme.name} names {path}, which does not exist"
