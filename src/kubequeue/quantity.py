"""Kubernetes resource quantities as exact integers.

Every amount in kube-queue is an integer count of *milli-units* (CPU in millicores, memory in
milli-bytes, GPUs in milli-GPUs). One unit for every resource keeps the fit arithmetic to plain
integer comparisons, and rounding up to the next milli-unit is what the API server does for CPU,
so a job is never judged smaller than the kubelet will account it.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = ["QuantityError", "format_milli", "parse_milli"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# The grammar from k8s.io/apimachinery/pkg/api/resource/quantity.go: a signed decimal number
# followed by a binary suffix, a decimal suffix, or a decimal exponent.
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)
_MILLI = Decimal(1000)
# Quantities beyond 2**63-1 units are rejected by the API server too; refusing them here keeps
# a typo like "1e100" from becoming a request no node could ever hold.
_LIMIT = Decimal(2**63 - 1) * _MILLI
_cache: dict[str, int] = {}


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept, with the offending text."""


def parse_milli(value: str | int | float) -> int:
    """Parse a quantity ("500m", "2Gi", "1.5", 4) into milli-units, rounding up.

    Raises QuantityError for text that is not a Kubernetes quantity. Negative values parse; the
    caller decides whether a negative amount makes sense where it appears.
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        value = repr(value)
    cached = _cache.get(value)
    if cached is not None:
        return cached
    text = value.strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a valid quantity (examples: 500m, 2, 1.5, 4Gi, 5G)")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{value!r} is not a valid quantity") from exc
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        scaled = number * _BINARY[suffix]
    elif suffix in _DECIMAL:
        scaled = number * _DECIMAL[suffix]
    else:
        scaled = number.scaleb(int(suffix[1:]))
    milli = scaled * _MILLI
    if abs(milli) > _LIMIT:
        raise QuantityError(f"{value!r} is too large to be a resource quantity")
    result = int(milli.to_integral_value(rounding=ROUND_CEILING))
    if len(_cache) < 4096:
        _cache[value] = result
    return result


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
