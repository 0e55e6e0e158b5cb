"""Defaults the SDK and the CLI share, in a module that imports nothing (the CLI's start-up reads it)."""

#: Where ``spillway serve`` listens, and what the SDK and the CLI talk to without a URL.
DEFAULT_URL = "http://127.0.0.1:8000"
