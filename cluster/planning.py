"""Planning off the event loop, in a thread that a time limit, a cancel or a shutdown can interrupt.

A job's planning (checking its spec against the sources, building a Polars query or a Dask
graph) is Python code that can run for seconds. ``asyncio.to_thread`` would leave it running
after its caller gave up: a cancelled job stayed RUNNING until its graph was built, and the
interpreter's exit waited for the thread. Here each planning runs in a daemon thread of its
own; giving up raises :class:`PlanningInterrupted` inside that thread (at its next Python
instruction) and returns at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, TypeVar

from spillway.jobs.errors import SpillwayError

log = logging.getLogger(__name__)

T = TypeVar("T")


class PlanningTimedOut(SpillwayError):
    """A job's planning ran past the service's limit (``SPILLWAY_MAX_PLANNING_S``)."""

    code = "planning_timed_out"


class PlanningInterrupted(BaseException):
    """Raised inside a planning thread whose caller gave up on it; a BaseException so that
    library code catching ``Exception`` does not swallow it."""


class PlanningCancelled(Exception):
    """The job was cancelled while it planned."""


def _interrupt(thread: threading.Thread) -> None:
    """Raise :class:`PlanningInterrupted` in ``thread`` at its next Python instruction.

    Code blocked in C (a file read, a lock) sees it when it returns to Python.
    """
    if thread.ident is None or not thread.is_alive():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(PlanningInterrupted))


#: Planning threads still running, each with the event its planning step sets when it has returned.
_LIVE: dict[threading.Thread, threading.Event] = {}
_LIVE_LOCK = threading.Lock()


def _stop(thread: threading.Thread, returned: threading.Event, seconds: float) -> None:
    """Interrupt ``thread`` until its planning step has returned, for up to ``seconds``.

    Once is not enough: an interrupt that lands in a weakref callback or a ``__del__`` is
    printed and dropped there ("Exception ignored in"), and the planning goes on.
    """
    deadline = time.monotonic() + seconds
    while thread.is_alive() and not returned.is_set() and time.monotonic() < deadline:
        _interrupt(thread)
        thread.join(0.05)


def stop_planning(timeout: float) -> int:
    """Interrupt every planning thread and wait up to ``timeout`` seconds for them to end; how many still run.

    For a service stopping: a daemon thread still running Python while the interpreter shuts
    down can abort it (a write to stderr then is a fatal error).
    """
    with _LIVE_LOCK:
        live = list(_LIVE.items())
    deadline = time.monotonic() + timeout
    for thread, returned in live:
        _stop(thread, returned, max(0.0, deadline - time.monotonic()))
        thread.join(max(0.0, deadline - time.monotonic()))
    return sum(thread.is_alive() for thread, _ in live)


async def run_planning(fn: Callable[..., T], *args: Any, name: str, deadline: float | None, cancelled: asyncio.Event) -> T:
    """``fn(*args)`` in a planning thread (with the caller's context variables), awaited.

    Parameters
    ----------
    fn, args
        The planning step; it must be safe to interrupt (it holds no state that outlives it).
    name
        The thread's name, for logs and tracebacks.
    deadline
        The event loop's time by which planning must be done; None: no limit.
    cancelled
        Set when the job is cancelled.

    Raises
    ------
    PlanningTimedOut
        The deadline passed.
    PlanningCancelled
        ``cancelled`` was set.
    asyncio.CancelledError
        The caller was cancelled (the service is stopping); the thread is interrupted first.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():
            outcome()

    def target() -> None:
        try:
            try:
                result = context.run(fn, *args)
            except PlanningInterrupted:
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                returned.set()
                _call_soon(loop, settle, functools.partial(done.set_exception, exc))
                return
            returned.set()
            _call_soon(loop, settle, functools.partial(done.set_result, result))
        except PlanningInterrupted:
            returned.set()  # the caller has gone: nobody waits for a result
        finally:
            with _LIVE_LOCK:
                _LIVE.pop(thread, None)

    context = contextvars.copy_context()
    returned = threading.Event()
    thread = threading.Thread(target=target, name=name, daemon=True)
    stop = asyncio.ensure_future(cancelled.wait())
    with _LIVE_LOCK:
        _LIVE[thread] = returned
    thread.start()
    timeout = None if deadline is None else max(0.0, deadline - loop.time())
    try:
        finished, _ = await asyncio.wait({done, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _stop_soon(thread, returned)
        raise
    finally:
        stop.cancel()
    if done in finished:
        return done.result()
    _stop_soon(thread, returned)
    done.cancel()
    if stop in finished:
        raise PlanningCancelled()
    raise PlanningTimedOut(f"{name}: past the planning deadline")


def _stop_soon(thread: threading.Thread, returned: threading.Event) -> None:
    """Interrupt ``thread`` now and again, from a thread of its own, without waiting for it here."""
    _interrupt(thread)
    threading.Thread(target=_stop, args=(thread, returned, 60.0), name=f"{thread.name}-stop", daemon=True).start()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop has closed: the service stopped while this thread planned
        pass


class ConcurrentBuilds:
    """Lets Dask graphs be built in several threads at once.

    On Python 3.11 every ``functools.cached_property`` holds one lock for all instances of
    its class, and dask-expr nests them in different orders on different graphs: two graphs
    built at once could deadlock, so they were built one at a time, and one job's long
    planning held up every other job. Python 3.12 removed that lock (gh-87634) and dask runs
    without it there; this removes it from dask's classes on 3.11 too, before each build (a
    module imported since, such as a reader loaded on first use, is covered then).
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        if sys.version_info >= (3, 12):
            return
        with self._lock:
            modules = [name for name in list(sys.modules) if name not in self._seen and name.startswith(("dask", "distributed"))]
            for name in modules:
                _unlock_module(sys.modules.get(name))
            self._seen.update(modules)

    def __exit__(self, *exc: object) -> None:
        return None


def _unlock_module(module: Any) -> None:
    for value in list(vars(module).values()) if module is not None else []:
        if not isinstance(value, type):
            continue
        for attribute in vars(value).values():
            if isinstance(attribute, functools.cached_property) and not isinstance(getattr(attribute, "lock", None), nullcontext):
                attribute.lock = nullcontext()  # type: ignore[attr-defined]
