"""Property: every reader of a file either side writes turns any content into its record or its documented safe
value (None, {}, a ValueError or a ConfigError), never another exception: arbitrary bytes, deep nesting, huge and
non-finite numbers, wrong types."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checks.gates import StatsSummary
from cutover import release as rel
from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import ControlRecord, Heartbeat, load_record, read_heartbeat, read_json
from cutover.hostprotocol.statsrecord import StatsRecord
from cutover.hostprotocol.phases import PhaseRecord
from cutover.hoststate import LockRecord, parse_lock, summarize_stats
from cutover.plugin.control import ArmedMarker, unclean_exit_state
from cutover.workflow.verdict import VerdictRecord

NUMBERS = st.one_of(st.integers(min_value=-(10**400), max_value=10**400), st.floats(), st.booleans())
VALUES = st.recursive(st.one_of(st.none(), NUMBERS, st.text(max_size=12)),
                      lambda inner: st.one_of(st.lists(inner, max_size=4),
                                              st.dictionaries(st.text(max_size=10), inner, max_size=5)),
                      max_leaves=25)
FIELD_NAMES = ["mode", "generation", "rank", "pid", "ts", "layers", "truth", "owner", "expires_at", "acquired_at",
               "phase", "written_at", "mode_active", "generation_seen", "counters", "outcome", "files", "archs",
               "release_id", "calls", "rel_l2_max", "rel_l2_hist", "err_custom", "stack", "library"]
RECORDS = st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES, max_size=10)


def _dumped(value) -> bytes:
    try:
        return json.dumps(value).encode()
    except ValueError:  # an int too long to print: its digits as Python would refuse them
        return b'{"generation": ' + b"9" * 5000 + b"}"


CONTENTS = st.one_of(
    st.binary(max_size=300),
    RECORDS.map(_dumped),
    VALUES.map(_dumped),
    st.integers(min_value=1, max_value=60_000).map(lambda depth: b'{"a":' * depth + b"0" + b"}" * depth),
    st.integers(min_value=1, max_value=60_000).map(lambda depth: b"[" * depth + b"]" * depth),
)


@given(content=CONTENTS)
def test_record_parsers_give_a_record_or_a_value_error(content):
    for parse in (ControlRecord.from_json, Heartbeat.from_json, LockRecord.from_json, VerdictRecord.from_json):
        try:
            parse(content if parse in (ControlRecord.from_json, Heartbeat.from_json) else
                  content.decode(errors="replace"))
        except ValueError:
            pass
    text = content.decode(errors="replace")
    phase = PhaseRecord.parse(text)
    assert phase is None or isinstance(phase.phase, str)
    lock = parse_lock(text)
    assert math.isfinite(lock.expires_at) and isinstance(lock.owner, str)


LAYER_FIELDS = ["calls", "compared", "rel_l2_max", "rel_l2_hist", "max_abs", "nonfinite_custom", "nonfinite_stock"]
STATS_LINES = st.fixed_dictionaries(
    {"rank": st.one_of(st.integers(-2, 8), VALUES), "generation": st.one_of(st.integers(0, 9), VALUES),
     "ts": st.one_of(st.floats(), VALUES), "mode": st.sampled_from(["shadow", "triton"]),
     "layers": st.dictionaries(st.text(max_size=3), st.one_of(
         st.dictionaries(st.sampled_from(LAYER_FIELDS), st.one_of(NUMBERS, st.lists(NUMBERS, max_size=4), VALUES)),
         VALUES), max_size=3),
     "truth": st.lists(st.one_of(st.fixed_dictionaries({"layer": VALUES, "err_custom": NUMBERS,
                                                         "err_stock": NUMBERS}), VALUES), max_size=3)},
).map(_dumped)


@given(content=st.one_of(CONTENTS, STATS_LINES))
def test_stats_lines_are_records_the_gates_fold_or_none(content):
    record = StatsRecord.from_line(content.decode(errors="replace"))
    if record is None:
        return
    summary = StatsSummary(generations={"h": record.generation}, truth_k=2.0, truth_floor=1e-3)
    assert summary.add("h", dataclasses.replace(record, mode="shadow"))  # the gates fold whatever the reader lets through
    assert isinstance(summarize_stats(record)["calls"], int)


@given(content=CONTENTS)
def test_file_readers_on_both_sides_never_raise(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("state")
    path = str(folder / "file.json")
    with open(path, "wb") as handle:
        handle.write(content)
    assert isinstance(read_json(path), dict)
    beat = read_heartbeat(path)
    assert beat is None or isinstance(beat.generation_seen, int)
    marker = ArmedMarker.__new__(ArmedMarker)
    marker.path = path
    state = unclean_exit_state(marker.read())  # the plugin's start after an unclean exit
    assert state.refuse_up_to is not None


@given(content=CONTENTS)
def test_a_release_manifest_loads_or_is_a_config_error(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("releases") / "0123456789-abcdef"
    os.makedirs(folder)
    (folder / "manifest.json").write_bytes(content)
    try:
        rel.load_release(folder)
    except ConfigError:
        pass


@pytest.mark.parametrize("content", [b"{" * 100_000, b'{"a": ' + b"1" * 5000 + b"}", b"\xff", b"[]", b"x" * (2 << 20)])
def test_load_record_refuses_with_a_value_error(content):
    with pytest.raises(ValueError):
        load_record(content, "record")
