#!/usr/bin/env bash
# Installs what tests/test_ui_browser.py needs: Debian's chromium + chromedriver and selenium in the venv.
# Idempotent: each part is installed only when missing, so running it before every `make test` is cheap.
# Debian's packages (not a browser downloaded by selenium-manager or playwright) because CI reaches only
# the package registries, and chromium-driver always matches the installed chromium's version.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
fi

# The venv is created by `make setup`; make it here too so the script also works on a fresh clone.
if [ ! -x .venv/bin/python ]; then
    make setup
fi
if ! .venv/bin/python -c 'import selenium' 2>/dev/null; then
    .venv/bin/pip install --quiet 'selenium>=4.11'
fi

/usr/bin/chromium --version
/usr/bin/chromedriver --version
.venv/bin/python -c 'import selenium; print("selenium", selenium.__version__)'
