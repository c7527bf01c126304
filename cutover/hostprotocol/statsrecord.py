"""One line of ``stats/rank-<r>.jsonl``: the plugin writes it; the gates, `status` and the report read it.

    {"ts", "rank", "generation", "mode", "release_id", "interval_s", "kernel",
     "layers": {"<layer>": {"calls", "compared", "rel_l2_max", "rel_l2_hist", "max_abs",
                            "nonfinite_custom", "nonfinite_stock"}},
     "truth": [{"layer", "err_custom", "err_stock", ...}]}

Counts are deltas over the interval; ``rel_l2_max`` and ``max_abs`` are maxima since the generation was applied.
`StatsRecord.parse` is the one reader: a line with any value it cannot use (a wrong type, a negative or absurd
count, too many layers) is unusable as a whole, so a damaged line is skipped and counted, never half-read.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

MAX_COUNT = 2**53  # counts are exact in a JSON double up to here; anything larger is damage
MAX_LAYERS = 4096
MAX_HIST_BUCKETS = 256
MAX_TRUTH_SAMPLES = 4096
MAX_TEXT = 256  # mode, kernel, release id, layer names
MAX_LINE_CHARS = 4 << 20  # a line of a 61-layer model is ~16 KB


@dataclass(frozen=True)
class LayerRecord:
    """One attention layer's numbers in one stats line."""

    calls: int = 0
    compared: int = 0
    rel_l2_max: float = 0.0  # NaN when a compared call was not finite: it ranks worst
    rel_l2_hist: tuple[int, ...] = ()
    max_abs: float = 0.0
    nonfinite_custom: int = 0
    nonfinite_stock: int = 0

    @classmethod
    def parse(cls, data: object) -> LayerRecord | None:
        if not isinstance(data, dict):
            return None
        counts = {name: data.get(name, 0) for name in ("calls", "compared", "nonfinite_custom", "nonfinite_stock")}
        hist = data.get("rel_l2_hist", [])
        floats = (data.get("rel_l2_max", 0.0), data.get("max_abs", 0.0))
        if (not all(map(_count, counts.values())) or not isinstance(hist, list) or len(hist) > MAX_HIST_BUCKETS
                or not all(map(_count, hist)) or not all(map(_number, floats))):
            return None
        return cls(rel_l2_max=float(floats[0]), max_abs=float(floats[1]), rel_l2_hist=tuple(hist), **counts)


@dataclass(frozen=True)
class StatsRecord:
    """One rank's stats line: the layers that had calls in the interval, and the truth samples it took."""

    ts: float
    rank: int
    generation: int
    mode: str
    release_id: str | None = None
    interval_s: float = 0.0
    kernel: str = ""
    layers: dict[str, LayerRecord] = field(default_factory=dict)
    truth: tuple[dict, ...] = ()

    def to_json(self) -> dict:
        data = asdict(self)
        data["truth"] = list(self.truth)
        for layer in data["layers"].values():
            layer["rel_l2_hist"] = list(layer["rel_l2_hist"])
        return data

    @classmethod
    def parse(cls, data: object) -> StatsRecord | None:
        """The record `data` (a decoded JSON line) holds, or None when any part of it is unusable."""
        if not isinstance(data, dict):
            return None
        ts, rank, generation = data.get("ts"), data.get("rank"), data.get("generation")
        mode, release_id, kernel = data.get("mode"), data.get("release_id"), data.get("kernel", "")
        interval_s, layers, truth = data.get("interval_s", 0.0), data.get("layers", {}), data.get("truth", [])
        if not (_number(ts) and math.isfinite(ts) and _count(rank) and _count(generation) and _text(mode)
                and _text(kernel) and (release_id is None or _text(release_id)) and _number(interval_s)
                and isinstance(layers, dict) and len(layers) <= MAX_LAYERS and isinstance(truth, list)
                and len(truth) <= MAX_TRUTH_SAMPLES and all(isinstance(sample, dict) for sample in truth)):
            return None
        parsed = {name: LayerRecord.parse(layer) for name, layer in layers.items()}
        if not all(_text(name) for name in parsed) or None in parsed.values():
            return None
        return cls(ts=float(ts), rank=rank, generation=generation, mode=mode, release_id=release_id,
                   interval_s=float(interval_s), kernel=kernel, layers=parsed, truth=tuple(truth))

    @classmethod
    def from_line(cls, line: str) -> StatsRecord | None:
        """The record of one JSONL line, or None for a torn, foreign, oversized or damaged line."""
        if len(line) > MAX_LINE_CHARS:
            return None
        try:
            return cls.parse(json.loads(line))
        except (ValueError, RecursionError):
            return None


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_COUNT


def _number(value: object) -> bool:
    return type(value) in (int, float) and (not isinstance(value, int) or abs(value) <= MAX_COUNT)


def _text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT
