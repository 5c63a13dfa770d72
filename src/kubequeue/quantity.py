"""Kubernetes resource quantities as exact integers, read the way the API server reads them.

Kubernetes holds a parsed quantity as an exact decimal rounded away from zero to a whole number
of nano-units (k8s.io/apimachinery/pkg/api/resource ``ParseQuantity``), and the scheduler turns
it into an int64 with ``MilliValue()`` (CPU) or ``Value()`` (everything else), both rounding up.
``parse_nano`` returns that exact nano count, so sums over containers round once, at the end,
as the scheduler's do; ``milli_value`` and ``unit_value`` are the two roundings.

Where this follows Go to the letter, and why:

* A quantity reaches Go code as a JSON string, and ``Quantity.UnmarshalJSON`` hands the raw,
  still-escaped text to ``strings.TrimSpace`` before ``ParseQuantity``. The API server writes
  JSON with encoding/json, which escapes control characters and U+2028/U+2029, so of Go's white
  space only the characters it writes literally (" ", U+0085, U+00A0, U+1680, U+2000-U+200A,
  U+202F, U+205F, U+3000) are trimmed: " 1" is 1 for every Go client, "1\\n" is an error.
* The grammar is Go's scanner (``parseQuantityString``), not the documented one: ASCII digits
  only, a sign, digits, an optional ``.`` and digits, then a suffix of ``eEinumkKMGTP``
  letters, an optional sign and digits, which must be one of the known suffixes or ``e``/``E``
  and a base-10 int64. A number without any digit ("+", ".", "Ki", "e5") is zero, except where
  Go leaves its int64 fast path for the decimal parser, which needs a digit: exponents below -9
  and the ``Pi``/``Ei`` suffixes are then errors, as they are there.
* The exponent is kept in an int32, as Go does after ``ParseInt(..., 64)``: "1e4294967296" is 1.
* A value beyond 2**63-1 units is refused (QuantityError "too large"). Go clamps binary-suffix
  values to 2**63-1 and keeps decimal ones, but its ``Value()`` and ``MilliValue()`` then return
  0 or a wrapped int64; no node offers such an amount, so failing loudly beats a silent 0.
* Negative amounts round away from zero, as Go's int64 path does (its big-decimal path rounds a
  negative fraction oddly); only the sign matters, since callers refuse negative requests.
* Go's own int32 scale arithmetic wraps within a few digits of exponent +-2**31, where it
  returns nonsense or never finishes; there this module returns the mathematical result.

The work is bounded for any input: exponents and digit counts are compared before arithmetic,
and only a bounded prefix of a very long number is ever converted to an integer.
"""

from __future__ import annotations

import re

__all__ = [
    "NANO_PER_MILLI",
    "NANO_PER_UNIT",
    "QuantityError",
    "format_milli",
    "milli_value",
    "parse_milli",
    "parse_nano",
    "unit_value",
]

NANO_PER_MILLI = 10**6
NANO_PER_UNIT = 10**9
_INT64_MAX = 2**63 - 1
# The int64 range of Value(), in nano-units.
_MAX_NANOS = _INT64_MAX * NANO_PER_UNIT
_MIN_NANOS = -(2**63) * NANO_PER_UNIT
# What strings.TrimSpace removes from a quantity as Go clients receive it: unicode.IsSpace
# characters that encoding/json writes unescaped (it escapes \t \n \v \f \r and U+2028/U+2029).
_WIRE_SPACE = " \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u202f\u205f\u3000"
# parseQuantityString, as one regular expression: possessive quantifiers scan left to right with
# no backtracking, like the Go loop, so a long malformed string costs linear time.
_SCAN = re.compile(r"([+-]?+)([0-9]*+)(?:\.([0-9]*+))?+([eEinumkKMGTP]*+[+-]?+[0-9]*+)")
_EXPONENT = re.compile(r"[eE]([+-]?)0*([0-9]+)")
_DECIMAL_SI = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# More significant digits than this never change a result: the rest is folded into one sticky
# "something non-zero follows" bit (see _scaled_ceiling).
_KEEP_DIGITS = 100
_CACHE_MAX = 4096
_cache: dict[str, int] = {}


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept, with the offending text."""


def parse_nano(value: str | int | float) -> int:
    """The exact amount in nano-units (1e-9) that Kubernetes keeps for this quantity.

    Raises QuantityError for anything that is not a quantity, or is too large to account.
    Negative amounts parse; the caller decides whether one makes sense where it appears.
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, int):
        return _bounded(value * NANO_PER_UNIT, value)
    if isinstance(value, float):
        value = repr(value)
    cached = _cache.get(value)
    if cached is not None:
        return cached
    result = _parse_text(value)
    if len(_cache) < _CACHE_MAX:
        _cache[value] = result
    return result


def parse_milli(value: str | int | float) -> int:
    """Milli-units, rounded up as ``Quantity.MilliValue()`` does ("500m" -> 500, "2" -> 2000)."""
    return milli_value(parse_nano(value))


def milli_value(nanos: int) -> int:
    """``MilliValue()``: nano-units to milli-units, rounding up (away from zero)."""
    return _ceil_away(nanos, NANO_PER_MILLI)


def unit_value(nanos: int) -> int:
    """``Value()``: nano-units to whole units, rounding up (away from zero)."""
    return _ceil_away(nanos, NANO_PER_UNIT)


def _ceil_away(nanos: int, unit: int) -> int:
    units = -(-abs(nanos) // unit)
    return units if nanos >= 0 else -units


def _parse_text(value: str) -> int:
    text = value.strip(_WIRE_SPACE)
    match = _SCAN.fullmatch(text)
    if not text or match is None:
        raise QuantityError(f"{value!r} is not a valid quantity (examples: 500m, 2, 1.5, 4Gi, 5G)")
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    binary = suffix in _BINARY_SI
    exponent = _BINARY_SI[suffix] if binary else _decimal_exponent(suffix, value)
    if not whole and not fraction:
        return _digitless(binary, exponent, value)
    if binary:
        nanos = _scaled_ceiling(whole + fraction, -len(fraction), exponent)
    else:
        nanos = _scaled_ceiling(whole + fraction, exponent - len(fraction), 0)
    if nanos is None:
        raise QuantityError(f"{value!r} is too large to be a resource quantity")
    return _bounded(-nanos if sign == "-" else nanos, value)


def _decimal_exponent(suffix: str, value: str) -> int:
    """The power of ten a decimal suffix stands for (ErrSuffix when it is not one)."""
    known = _DECIMAL_SI.get(suffix)
    if known is not None:
        return known
    match = _EXPONENT.fullmatch(suffix)
    if match is None or len(match[2]) > 19 or int(match[2]) > _INT64_MAX + (match[1] == "-"):
        raise QuantityError(
            f"{value!r} is not a valid quantity: unknown suffix {suffix!r} "
            "(use n, u, m, k, M, G, T, Ki, Mi, Gi, Ti or an exponent like e3)"
        )
    parsed = -int(match[2]) if match[1] == "-" else int(match[2])
    # Go stores the strconv.ParseInt result in an int32.
    return (parsed + 2**31) % 2**32 - 2**31


def _digitless(binary: bool, exponent: int, value: str) -> int:
    """A number with no digit at all: zero on Go's int64 fast path, an error off it."""
    # ParseQuantity's tests for its int64 path: precision 15 - len("0") - exponent*3/10 - 1 >= 0
    # for a binary suffix, scale >= Nano for a decimal one.
    fast = 13 - exponent * 3 // 10 >= 0 if binary else exponent >= -9
    if not fast:
        raise QuantityError(f"{value!r} is not a valid quantity: it has no digits")
    return 0


def _scaled_ceiling(digits: str, exp10: int, exp2: int) -> int | None:
    """ceil(int(digits) * 2**exp2 * 10**exp10 * 1e9): the value in nano-units, rounded up.

    None when the value is beyond 2**63-1 units. Only ever converts a bounded number of digits:
    beyond _KEEP_DIGITS significant digits the tail lies below the granularity of the kept
    part, so it can only matter as "some non-zero remainder", which forces the round-up.
    """
    significant = digits.lstrip("0").rstrip("0")
    if not significant:
        return 0
    exp10 += len(digits.lstrip("0")) - len(significant) + 9  # trailing zeros, and unit -> nano
    length = len(significant)
    if length + exp10 - 9 >= 20:  # at least 10**19 units
        return None
    if length + exp10 + 19 <= 0:  # below 10**(length+exp10) * 2**60 nanos, so below one nano
        return 1
    sticky = length > _KEEP_DIGITS
    if sticky:
        exp10 += length - _KEEP_DIGITS
        significant = significant[:_KEEP_DIGITS]
    scaled = int(significant) << exp2
    if exp10 >= 0:
        return scaled * _ten_to(exp10)
    quotient, remainder = divmod(scaled, _ten_to(-exp10))
    return quotient + 1 if remainder or sticky else quotient


def _ten_to(power: int) -> int:
    result: int = 10**power
    return result


def _bounded(nanos: int, value: object) -> int:
    """``nanos`` if its Value() fits an int64, the type every Kubernetes component counts in."""
    if not _MIN_NANOS <= nanos <= _MAX_NANOS:
        raise QuantityError(f"{value!r} is too large to be a resource quantity")
    return nanos


def format_milli(resource: str, milli: int) -> str:
    """Render milli-units the way a user would write them for this resource (for messages)."""
    if resource == "cpu":
        return f"{milli}m" if milli % 1000 else str(milli // 1000)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        units = milli // 1000
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units >= size and units % size == 0:
                return f"{units // size}{suffix}"
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20)):
            if units >= size:
                return f"{units / size:.1f}{suffix}"
        return str(units)
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"
