"""JSON for other programs (`--json`, report.json): strict JSON, whose parsers reject NaN and Infinity.

A non-finite number is the interesting case here (a NaN output, an unbounded error ratio), so it is kept, as
the string "NaN", "Infinity" or "-Infinity", rather than dropped.
"""

from __future__ import annotations

import json
import math


def _finite_or_named(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite_or_named(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_named(item) for item in value]
    return value


def dumps(document, **options) -> str:
    """json.dumps of `document` with non-finite floats as strings; anything else not JSON goes through str."""
    return json.dumps(_finite_or_named(document), allow_nan=False, default=str, **options)
