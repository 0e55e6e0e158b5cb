#!/usr/bin/env bash
# Regenerate deploy/requirements.lock: every package the images install from PyPI, pinned with
# its hashes, resolved from pyproject.toml's ranges (the runtime, the postgres and oidc extras,
# setuptools to build the project itself, and the gpu extra's packages outside RAPIDS) for the
# images' Python 3.12 on x86-64 Linux.
# `make lock` runs this; run it after changing a dependency, and commit the result.
# Needs uv: the one on PATH, else the project venv's (installed there when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
UV="$(command -v uv || true)"
if [ -z "$UV" ]; then
    UV=.venv/bin/uv
    if [ ! -x "$UV" ]; then
        [ -x .venv/bin/pip ] || { echo "no uv on PATH and no .venv: run 'make setup' first, or install uv" >&2; exit 1; }
        .venv/bin/pip install --quiet 'uv>=0.5'
    fi
fi
# Besides pyproject's: setuptools (the images build the project with --no-build-isolation, so
# the build backend is pinned too) and the gpu extra's packages that are not RAPIDS' own, which
# the gpu image adds to its base (tests/test_deploy.py checks this list against the extra).
printf 'setuptools>=69\nstructlog>=24.1\n' | "$UV" pip compile pyproject.toml - \
    --extra postgres --extra oidc \
    --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
    --generate-hashes --custom-compile-command 'make lock' \
    --quiet --output-file deploy/requirements.lock
