"""Numbers as people read them, the same in every output (terminal, HTML, export, messages).

    fmt_bytes(3 * 2**30)         # "3.0 GiB"
    fmt_hours(0.5), fmt_hours(72), fmt_hours(72, days_beside=True)   # "30.0 min", "3.0 d", "72.0 h (3.0 d)"
    fmt_usd(1234.5), fmt_pct(0.295)                                   # "$1,234.50", "29.5%"
    fmt_tokens(1e9), fmt_tokens(2.5e11), fmt_tokens(12_345)           # "1B", "250B", "12.3k"

and sizes as people write them (a spec's memory limit):

    bytes_from_text("80 GiB"), bytes_from_text("75GB"), bytes_from_text("1e9")   # 85899345920, 75000000000, 1000000000
"""

from __future__ import annotations

from typing import Any


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "not measured"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return str(n)


def bytes_from_text(value: Any) -> Any:
    """A byte count from what a user wrote: an integer, a number in exponent form ("1e9" and
    "8.0e10", which YAML 1.1 reads as text, or 8.0e+10, a float), or a number with a unit:
    "80 GiB", "512MiB" (powers of 1024), "75 GB", "80G" (powers of 1000; pydantic's ByteSize
    reads the units). Not a whole number of bytes ("1.5", 2.5): ValueError, rather than rounding
    it away. Anything else is returned as it came, for the field's own type to judge."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    if isinstance(value, bool):  # YAML's yes/no/true: not 1 byte
        raise ValueError(f"{value} is not a size: write a number of bytes or a number with a unit, e.g. '80 GB'")
    if isinstance(value, str):
        try:
            value = float(value)  # "1e9", "4096", " 2.5e10 "
        except ValueError:
            try:
                return int(TypeAdapter(ByteSize).validate_python(value))
            except ValidationError:
                raise ValueError(f"{value!r} is not a size: write a number of bytes or a number "
                                 "with a unit, e.g. 80000000000, 8e10, '80 GB' or '74.5 GiB'") from None
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{value:g} is not a whole number of bytes: give bytes, or a unit, e.g. '1.5 GiB'")
        return int(value)
    return value


def fmt_hours(h: float | None, days_beside: bool = False) -> str:
    """Minutes under an hour, hours under two days, days beyond. `days_beside`: always in
    hours, with days beside from two days on (an axis in hours reads better so)."""
    if h is None:
        return "-"
    if days_beside:
        return f"{h:,.1f} h" + (f" ({h / 24:,.1f} d)" if h >= 48 else "")
    if h < 1:
        return f"{h * 60:.1f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:,.1f} d"


def fmt_gpu_hours(x: float) -> str:
    """GPU-hours without rounding a short run to 0 or 1: '1,234', '12.3', '0.55'."""
    return f"{x:,.0f}" if x >= 100 else (f"{x:.1f}" if x >= 10 else f"{x:.2g}")


def fmt_usd(x: float | None) -> str:
    return "-" if x is None else (f"${x:,.2f}" if x >= 1 else f"${x:.4f}")


def fmt_usd_range(low: float, high: float) -> str:
    """Both ends of a dollar range at one precision: "$0.91 to $1.11" (cents once the range
    reaches a dollar, where fmt_usd alone would print "$0.9057 to $1.11"), unless cents would
    show the low end as $0.00."""
    if high >= 1 and low >= 0.01:
        return f"${low:,.2f} to ${high:,.2f}"
    return f"{fmt_usd(low)} to {fmt_usd(high)}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_tokens(n: float | None) -> str:
    """A token count to 3 significant digits with its scale: '1B', '250B', '1.5T', '12.3k'."""
    if n is None:
        return "-"
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"
