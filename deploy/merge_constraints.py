"""Constraints for pip in the gpu image: the base image's own packages as they are, the lock's pins for the rest.

The RAPIDS base image brings cuDF, Dask and their dependencies as conda packages; pip must
never replace one of them, so the image's ``pip list --format=freeze`` wins. Every other
package pip may add (FastAPI, typer, psycopg, PyJWT, ...) is held to ``deploy/requirements.lock``,
so two builds on the same base image install the same versions. Hashes are left out: pip
refuses them in constraints, and the conda packages have none to check.

Usage: ``python merge_constraints.py IMAGE_FREEZE LOCK > constraints.txt``
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;\\]+)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``PyJWT`` and ``pyjwt``, ``typing_extensions`` and ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``name==version`` requirements of a freeze or lock file by canonical name (hash and comment lines skipped)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if match := _PIN.match(line.strip()):
            found[canonical(match[1])] = match[3]
    return found


def merge(image: str, lock: str) -> list[str]:
    """Constraint lines: every package of ``image`` at its version, then the lock's for packages the image lacks."""
    present = pins(image)
    locked = {name: version for name, version in pins(lock).items() if name not in present}
    return [f"{name}=={version}" for name, version in sorted({**present, **locked}.items())]


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    print("\n".join(merge(Path(argv[1]).read_text(), Path(argv[2]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
