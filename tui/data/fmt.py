"""Formatting shared by every view: significant digits, times, values with units, ages, paths
and names cut to a column.
"""

from __future__ import annotations

import math
from typing import Any

from diag.bench import Stats
from diag.tui.data.common import NA

# ---------------------------------------------------------------- formatting


def sig(v: float, digits: int = 3) -> str:
    """`v` to `digits` significant digits in plain notation (never `1.1e+02`)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    places = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{round(v, places):.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def time_unit(s: float) -> tuple[str, float]:
    """The readable unit for a time in seconds, and its scale."""
    a = abs(s)
    for name, scale in _TIME_UNITS:
        if a >= scale:
            return name, scale
    return _TIME_UNITS[-1]


def fmt_time(s: float) -> str:
    unit, scale = time_unit(s)
    return f"{sig(s / scale)} {unit}"


def fmt_value(v: Any, unit: str = "") -> str:
    """One value in its unit: times in a readable unit, counts with their unit word."""
    if v is NA or v is None:
        return "n/a"
    if unit == "s" and isinstance(v, (int, float)):
        return fmt_time(float(v))
    if isinstance(v, float):
        text = sig(v)
    else:
        return str(v)
    return f"{text} {unit}" if unit and unit != "syncs" else text


def fmt_stats(s: Stats | None, unit: str, compact: bool = False, n: bool = True) -> str:
    """Median with IQR and n in plain notation: `167 ms (IQR 110–280, n=10)`; compact:
    `167 ms (110–280) n=10` (`n=False`: without n, shown elsewhere). A spread of zero is left
    out (`2 (n=9)`)."""
    if s is None:
        return "-"
    if unit == "s":
        u, scale = time_unit(s.median)
        med, lo, hi, suffix = sig(s.median / scale), sig(s.p25 / scale), sig(s.p75 / scale), f" {u}"
    else:
        med, lo, hi = sig(s.median), sig(s.p25), sig(s.p75)
        suffix = f" {unit}" if unit and unit not in ("syncs",) and not compact else ""
    count = f" n={s.n}" if n else ""
    if s.n > 1 and lo != hi:
        return (f"{med}{suffix} ({lo}–{hi}){count}" if compact
                else f"{med}{suffix} (IQR {lo}–{hi}, n={s.n})")
    return f"{med}{suffix}{count}" if compact else f"{med}{suffix} (n={s.n})"


def fmt_ratio(r: float | None) -> str:
    """The bare after/before (the export and `diag bench` keep the number)."""
    return sig(r, 3) if r is not None else "-"


def fmt_age(age: float | None) -> str:
    """How long ago a live value was read: `3 s ago`, `2 min ago`."""
    if age is None:
        return ""
    if age < 60:
        return f"{max(0, int(age))} s ago"
    return f"{int(age // 60)} min ago"


def short_path(loc: str) -> str:
    """`sglang/srt/layers/attention/x.py:12` → `x.py:12` (the export keeps it whole)."""
    return loc.removeprefix("sglang/srt/layers/attention/").removeprefix("sglang/srt/")


def shorten(name: str, width: int, prose: bool = False) -> str:
    """A name cut to `width` cells, keeping its end for dotted names (`…Backend._attach_meta`)
    and its start otherwise (always for `prose`, a sentence that may start with a dotted
    name); the whole name is in the detail pane and the export."""
    if len(name) <= width:
        return name
    if width <= 1:
        return "…"[:width]
    if not prose and "." in name.split(" ")[0]:
        return "…" + name[-(width - 1):]
    return name[:width - 1] + "…"
