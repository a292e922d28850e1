"""JSON Schemas of diag's JSON outputs (loaded with importlib.resources) and the one version
number every JSON document diag writes carries."""

import json
import math
from typing import Any

SCHEMA_VERSION = 1


def finite(doc: Any) -> Any:
    """`doc` as JSON can hold it: a float that is not finite (an engine's sums past the largest
    float, a NaN a damaged file carried) becomes null, never `NaN`/`Infinity` (not JSON)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite(v) for v in doc]
    return doc


def _finite_float(text: str) -> float | str:
    v = float(text)
    return v if math.isfinite(v) else text


def loads_finite(text: str | bytes) -> Any:
    """json.loads for files diag reads: `NaN`, `Infinity` and numbers past the largest float
    (`1e999`) are not JSON numbers; they are kept as the strings written, so every typed
    check names them (`syncs.seconds is not float`) and no output carries them."""
    return json.loads(text, parse_constant=str, parse_float=_finite_float)
