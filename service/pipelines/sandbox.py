"""The Jinja sandbox that pipeline templates render in, bounded in size and in time.

Size: every value a template builds (a concatenation with ``+`` or ``~``, a repeat, a
filter's or a method's result, a macro's or a ``{% set %}`` block's output, each printed
value) is at most :data:`MAX_RENDERED_CHARS` characters or items, counted through nested
lists and dicts. Operations whose result can be a product of their inputs' sizes (``*``,
``join``, ``replace``, ``translate``, ``indent``, ``wordwrap``, ``expandtabs``, ``%``
and ``format`` with widths or repeated fields) are refused *before* they build it, from
an upper bound of their result; the others are checked as they return. Lists are
immutable here (no ``append``/``extend``), so a value can only grow through these checks.

Time: :func:`deadline` sets, per thread, the instant a render must stop at. Every
operation the sandbox sees (calls, operators, attribute and item lookups, filters, loop
iterations, printed values, joins of output) checks it and raises :class:`RenderOverTime`,
so a CPU bomb (macros calling macros, recursive loops) stops at its budget instead of
holding a worker thread long after its caller was answered.
"""

from __future__ import annotations

import functools
import inspect
import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from jinja2 import StrictUndefined
from jinja2.runtime import LoopContext, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

#: The longest string (or sequence) a template may build or render into, per value.
MAX_RENDERED_CHARS = 100_000
_MAX_REPEAT = 10_000
_MAX_EXPONENT = 64
_MAX_INT_BITS = 4 * MAX_RENDERED_CHARS  # about 120,000 decimal digits
# Filters and str methods whose numeric argument is the size of what they build.
_SIZED = frozenset({"center", "indent", "wordwrap", "truncate", "batch", "slice", "ljust", "rjust", "zfill", "expandtabs"})
_PRINTF = re.compile(r"%(\([^)]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?([diouxXeEfFgGcrsa%])")

_CLOCK = threading.local()


class RenderOverTime(Exception):  # noqa: N818 - not an error of the template's text, of its cost
    """The render ran past the deadline set by :func:`deadline`."""


@contextmanager
def deadline(instant: float | None) -> Iterator[None]:
    """Make every sandboxed operation in this thread stop at ``instant`` (``time.monotonic()``)."""
    previous = getattr(_CLOCK, "deadline", None)
    _CLOCK.deadline = instant
    try:
        yield
    finally:
        _CLOCK.deadline = previous


def check_time() -> None:
    """Raise :class:`RenderOverTime` once this thread's render is past its deadline."""
    instant = getattr(_CLOCK, "deadline", None)
    if instant is not None and time.monotonic() > instant:
        raise RenderOverTime


def weight(value: Any, limit: int = MAX_RENDERED_CHARS) -> int:
    """Characters and items in ``value``, counted through lists, tuples, sets and dicts.

    Stops counting once past ``limit``, so weighing a huge value is cheap.
    """
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset, dict)):
            total += len(item)
            if total > limit:
                return total
            stack.extend(item.items() if isinstance(item, dict) else item)
        if total > limit:
            return total
    return total


def check_size(value: Any, what: str) -> Any:
    """``value`` if it is within :data:`MAX_RENDERED_CHARS` (and an int within its bits); else a SecurityError."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _MAX_INT_BITS:
            raise SecurityError(f"{what} gives a number of {value.bit_length()} bits, over {_MAX_INT_BITS}")
        return value
    size = weight(value)
    if size > MAX_RENDERED_CHARS:
        raise SecurityError(f"{what} gives {size} items, over {MAX_RENDERED_CHARS}")
    return value


def _refuse_bound(bound: int, what: str) -> None:
    if bound > MAX_RENDERED_CHARS:
        raise SecurityError(f"{what} could give {bound} characters, over {MAX_RENDERED_CHARS}")


def _check_numbers(args: Iterable[Any], what: str) -> None:
    for value in args:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAX_RENDERED_CHARS:
            raise SecurityError(f"{what} was given {value}, over {MAX_RENDERED_CHARS}")


def _format_bound(pattern: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], what: str, *, printf: bool) -> None:
    """Refuse a format whose result may exceed the cap: widths, precisions and fields used more than once."""
    if not isinstance(pattern, str):
        return
    names: list[str] = []
    digits = 0
    if printf:
        for match in _PRINTF.finditer(pattern):
            key, width, precision, _ = match.groups()
            if "*" in (width, precision):
                raise SecurityError(f"{what}: a '*' width takes its size from the arguments; write the number")
            digits += int(width or 0) + int(precision or 0)
            names.append(key or "")
    else:
        try:
            fields = list(string.Formatter().parse(pattern))
        except ValueError:
            return  # str.format refuses it itself
        for _, name, spec, _ in fields:
            if name is None:
                continue
            if spec and "{" in spec:
                raise SecurityError(f"{what}: a nested {{}} in a format spec takes its size from the arguments; write the number")
            digits += sum(int(d) for d in re.findall(r"\d+", spec or ""))
            names.append(re.split(r"[.\[]", name, maxsplit=1)[0])
    if digits > MAX_RENDERED_CHARS:
        raise SecurityError(f"{what} has a width of {digits}, over {MAX_RENDERED_CHARS}")
    values = [*args, *kwargs.values()]
    if len(values) == 1 and isinstance(values[0], (tuple, dict)):  # '%s %s' % (a, b), '%(a)s' % {...}
        values = list(values[0].values() if isinstance(values[0], dict) else values[0])
    named = [n for n in names if n]
    if len(named) == len(set(named)):  # each field uses another argument
        bound = sum(weight(v) for v in values)
    else:  # '{0}{0}{0}', '%(a)s%(a)s': an argument may be used once per field
        bound = len(names) * max((weight(v) for v in values), default=0)
    _refuse_bound(len(pattern) + digits + bound, what)


def _replace_bound(s: Any, old: Any, new: Any, count: Any) -> int:
    if not isinstance(s, (str, bytes)) or not isinstance(new, (str, bytes)):
        return 0
    times = len(s) // len(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    return len(s) + times * len(new)


def _join_bound(separator: Any, items: Any) -> int:
    if not isinstance(separator, (str, bytes)) or not hasattr(items, "__len__"):
        return 0
    return weight(items) + len(separator) * len(items)


def _method_bound(method: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """An upper bound of the size a str (or bytes) method's result may have, where it can be a product."""
    owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
    if not isinstance(owner, (str, bytes)):
        return 0
    if name == "join" and args:
        return _join_bound(owner, args[0])
    if name == "replace" and len(args) >= 2:
        return _replace_bound(owner, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1))
    if name == "translate" and args and isinstance(args[0], Mapping):
        widest = max((len(v) for v in args[0].values() if isinstance(v, (str, bytes))), default=1)
        return len(owner) * max(widest, 1)
    if name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        return len(owner) + owner.count("\t" if isinstance(owner, str) else b"\t") * (size if isinstance(size, int) else 0)
    return 0


def _filter_bound(name: str, bound: inspect.BoundArguments) -> int:
    """An upper bound of the size a filter's result may have, where it can be a product."""
    a = bound.arguments
    if name == "join":
        return _join_bound(a.get("d", ""), a.get("value"))
    if name == "replace":
        return _replace_bound(a.get("s"), a.get("old"), a.get("new"), a.get("count"))
    if name == "indent" and isinstance(a.get("s"), str):
        width = a.get("width", 4)
        return len(a["s"]) + (a["s"].count("\n") + 1) * (len(width) if isinstance(width, str) else int(width))
    if name == "wordwrap" and isinstance(a.get("s"), str):
        wrapstring = a.get("wrapstring") or "\n"
        return len(a["s"]) * (1 + len(wrapstring))
    return 0


class _Bounded:
    """An iterator a filter returned (``map``, ``select``, ``batch``, ...), stopped once what it gave is too big or too late."""

    def __init__(self, iterator: Iterator[Any], what: str) -> None:
        self._iterator, self._what, self._given = iterator, what, 0

    def __iter__(self) -> _Bounded:
        return self

    def __next__(self) -> Any:
        check_time()
        item = next(self._iterator)
        self._given += weight(item) + 1
        if self._given > MAX_RENDERED_CHARS:
            raise SecurityError(f"{self._what} gives over {MAX_RENDERED_CHARS} items")
        return item


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(function)

    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        check_time()
        what = f"the filter '{name}'"
        for value in (*args, *kwargs.values()):  # a literal such as [b, b, b] is checked where it is used
            check_size(value, f"an argument of {what}")
        if name in _SIZED:
            _check_numbers((*args[1:], *kwargs.values()), what)
        if name == "format" and args:
            _format_bound(args[0], args[1:], kwargs, "the format string", printf=True)
        else:
            try:
                arguments = signature.bind(*args, **kwargs)
            except TypeError:
                arguments = None  # wrong arguments: the filter says so itself
            if arguments is not None:
                if name == "sum" and not isinstance(arguments.arguments.get("start", 0), (int, float)):
                    raise SecurityError("the filter 'sum' adds numbers only")  # summing lists copies them again and again
                _refuse_bound(_filter_bound(name, arguments), what)
        result = function(*args, **kwargs)
        if isinstance(result, Iterator) and not isinstance(result, (str, bytes)):
            return _Bounded(result, what)
        return check_size(result, what)

    return bounded


class _TimedLoop(LoopContext):
    """Jinja's loop context, checking the deadline on every iteration (recursive loops)."""

    def __next__(self) -> tuple[Any, LoopContext]:
        check_time()
        return super().__next__()


def _bounded_join(join: Callable[[Iterable[Any]], str]) -> Callable[[Iterable[Any]], str]:
    @functools.wraps(join)
    def bounded(seq: Iterable[Any]) -> str:
        check_time()
        parts = list(seq)  # '~' operands, or the output a macro, a loop or a {% set %} block buffered
        for part in parts:
            check_size(part, "a concatenation")  # str() of a list is at most a few times its weight
        _refuse_bound(sum(weight(p) for p in parts), "a concatenation")
        return check_size(join(parts), "a concatenation")

    return bounded


class SpecTemplates(ImmutableSandboxedEnvironment):
    """The sandbox: immutable values, every operation checked for size and time."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"-", "+"})
    concat = staticmethod(_bounded_join("".join))  # type: ignore[assignment]  # buffered output

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        check_time()
        check_size(left, "an operand")
        check_size(right, "an operand")
        if operator_name == "**":
            if isinstance(right, (int, float)) and abs(right) > _MAX_EXPONENT:
                raise SecurityError(f"exponent {right} is over {_MAX_EXPONENT}")
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() * abs(right) > _MAX_INT_BITS:
                raise SecurityError(f"{left.bit_length()}-bit number to the power {right} is over {_MAX_INT_BITS} bits")
        elif operator_name == "*":
            self._check_repeat(left, right)
        elif operator_name == "%" and isinstance(left, str):
            _format_bound(left, (right,), {}, "the format string", printf=True)
        return check_size(self.binop_table[operator_name](left, right), f"'{operator_name}'")

    @staticmethod
    def _check_repeat(left: Any, right: Any) -> None:
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                if count > _MAX_REPEAT:
                    raise SecurityError(f"repeating a sequence {count} times is over {_MAX_REPEAT}")
                if weight(seq) * count > MAX_RENDERED_CHARS:  # nested repeats: (ds * 10000) * 2000
                    raise SecurityError(f"repeating {weight(seq)} items {count} times gives {weight(seq) * count}, over {MAX_RENDERED_CHARS}")
        if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > _MAX_INT_BITS:
            raise SecurityError(f"multiplying numbers of {left.bit_length()} and {right.bit_length()} bits is over {_MAX_INT_BITS} bits")

    def call_unop(self, context: Any, operator_name: str, arg: Any) -> Any:
        check_time()
        return super().call_unop(context, operator_name, arg)

    def getattr(self, obj: Any, attribute: str) -> Any:
        check_time()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        check_time()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Any:
        # str.format and format_map are wrapped where they are looked up: bound their result there.
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        pattern, is_map = value.__self__, value.__name__ == "format_map"

        @functools.wraps(wrapped)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            if is_map and len(args) == 1 and isinstance(args[0], Mapping):
                _format_bound(pattern, (), args[0], "the format string", printf=False)
            else:
                _format_bound(pattern, args, kwargs, "the format string", printf=False)
            return wrapped(*args, **kwargs)

        return bounded

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's signature
        check_time()
        name = getattr(__obj, "__name__", "")
        # Methods such as str.center, str.zfill build their result at once; str.join, replace, ... a product.
        if name in _SIZED:
            _check_numbers((*args, *kwargs.values()), f"'{name}'")
        for value in (*args, *kwargs.values()):
            check_size(value, f"an argument of '{name or 'a call'}'")
        _refuse_bound(_method_bound(__obj, args, kwargs), f"'{name}'")
        return check_size(super().call(__context, __obj, *args, **kwargs), f"'{name or 'a call'}'")


def _finalize(value: Any) -> Any:
    # Every printed value ({{ ... }}), before Jinja turns it into text.
    check_time()
    return check_size(value, "a printed value")


class _SpecTemplate(SpecTemplates.template_class):  # type: ignore[misc, name-defined]
    """A compiled template whose '~' joins and loop contexts are the bounded ones."""

    @classmethod
    def _from_namespace(cls, environment: Any, namespace: Any, globals: Any) -> Any:  # noqa: A002 - jinja's signature
        # The compiled module imported these from jinja2.runtime; its functions look them up here at call time.
        namespace["str_join"] = _bounded_join(str_join)
        namespace["markup_join"] = _bounded_join(markup_join)
        namespace["LoopContext"] = _TimedLoop
        return super()._from_namespace(environment, namespace, globals)


SpecTemplates.template_class = _SpecTemplate


def make_environment() -> SpecTemplates:
    """The sandbox with no globals (no ``range()``, ``dict()``, ``lipsum()``) and bounded filters."""
    env = SpecTemplates(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize)
    env.globals.clear()  # only the variables we pass
    env.filters = {name: _bounded_filter(name, function) for name, function in env.filters.items()}
    return env

