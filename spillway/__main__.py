"""``python -m spillway``: the ``spillway`` command."""

from spillway.service.cli import main

main()
