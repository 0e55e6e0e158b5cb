"""What ``try_cast`` accepts as a number, shared by both engines' lowerings so that they read text alike."""

from __future__ import annotations

#: Text read as an integer: a sign and up to 18 digits (so every one fits int64); anything else is null.
INTEGER_TEXT = r"^[+-]?[0-9]{1,18}$"
#: Text read as a float: a decimal number with an optional exponent ('inf', 'nan', ' 1' and '' are not).
DECIMAL_TEXT = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
#: The values an integer type holds: [low, high).
INTEGER_RANGES = {"int64": (-(2**63), 2**63), "int32": (-(2**31), 2**31)}
