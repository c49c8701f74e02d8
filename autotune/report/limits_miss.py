"""How far a report's options are from its budget and deadline where none meets both: the
cheapest option's dollars, the soonest's hours, and the flag values that would let one in.

    figures, fix = limits_miss(options, max_usd=0.5, deadline_hours=None)
    # "the cheapest option, trial 2 on aws-c7i-ondemand, costs $1.62",
    # "raise --max-usd to 1.62 or more"

The flag values are rounded up (to the cent, or 0.1 h), so the value written lets the option in.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Any

from autotune.format import fmt_hours, fmt_usd


def flag_usd(x: float) -> str:
    """A dollar figure as a --max-usd value at least `x`: cents from $1, else 4 decimals."""
    return _ceil(x, "0.01" if x >= 1 else "0.0001")


def flag_hours(h: float) -> str:
    """An hours figure as a --deadline-hours value at least `h`: 0.1 h from 1 h, else 0.01 h."""
    return _ceil(h, "0.1" if h >= 1 else "0.01")


def _ceil(x: float, step: str) -> str:
    # repr(x) reads back as x, so its ceiling, read back as a float, is never below x.
    return str(Decimal(repr(x)).quantize(Decimal(step), rounding=ROUND_CEILING))


def _h(h: float) -> str:
    """Hours as the flag counts them, with days beside from two days on."""
    return fmt_hours(h, days_beside=True)


def _which(o: dict[str, Any]) -> str:
    return f"trial {o['trial']} on {o['offer']}"


def limits_miss(options: list[dict[str, Any]], max_usd: float | None,
                deadline_hours: float | None) -> tuple[str, str]:
    """(the figures, the flags to raise) of `options` (each with trial, offer, usd, hours), none
    within the limits set. With both set: the limit that alone keeps out the nearest option,
    or both where neither alone would let one in."""
    cheapest = min(options, key=lambda o: (o["usd"], o["hours"]))
    soonest = min(options, key=lambda o: (o["hours"], o["usd"]))
    if deadline_hours is None:
        return (f"the cheapest option, {_which(cheapest)}, costs {fmt_usd(cheapest['usd'])}",
                f"raise --max-usd to {flag_usd(cheapest['usd'])} or more")
    if max_usd is None:
        return (f"the soonest option, {_which(soonest)}, takes {_h(soonest['hours'])}",
                f"raise --deadline-hours to {flag_hours(soonest['hours'])} or more")
    in_time = [o for o in options if o["hours"] <= deadline_hours]
    in_budget = [o for o in options if o["usd"] <= max_usd]
    figures, fixes = [], []
    if in_time:
        o = min(in_time, key=lambda o: (o["usd"], o["hours"]))
        figures.append(f"within the deadline the cheapest option, {_which(o)}, costs {fmt_usd(o['usd'])}")
        fixes.append(f"raise --max-usd to {flag_usd(o['usd'])} or more (the deadline kept)")
    if in_budget:
        o = min(in_budget, key=lambda o: (o["hours"], o["usd"]))
        figures.append(f"within the budget the soonest option, {_which(o)}, takes {_h(o['hours'])}")
        fixes.append(f"raise --deadline-hours to {flag_hours(o['hours'])} or more (the budget kept)")
    if figures:
        return "; ".join(figures), ", or ".join(fixes)
    both = f"costs {fmt_usd(cheapest['usd'])} and takes {_h(cheapest['hours'])}"
    if soonest is not cheapest:
        both += (f"; the soonest, {_which(soonest)}, takes {_h(soonest['hours'])} and costs "
                 f"{fmt_usd(soonest['usd'])}")
    also = " (also the soonest)" if soonest is cheapest else ""
    return (f"the cheapest option{also}, {_which(cheapest)}, {both}",
            f"raise both, e.g. --max-usd {flag_usd(cheapest['usd'])} "
            f"--deadline-hours {flag_hours(cheapest['hours'])}")
