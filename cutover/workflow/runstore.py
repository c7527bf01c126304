"""Local copy of every shadow run: reports/<run_id>/ holds run.json, verdict.json, the run's stats records
(stats/<host>/rank-<r>.jsonl) and, once `cutover report` ran, the report itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from checks.policy import Policy

from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import append_jsonl, atomic_write_text, load_record
from cutover.hostprotocol.statsrecord import StatsRecord
from cutover.workflow.verdict import VerdictRecord

REPORTS_DIR_ENV = "CUTOVER_REPORTS_DIR"
DEFAULT_REPORTS_DIR = "reports"


def reports_root(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get(REPORTS_DIR_ENV) or DEFAULT_REPORTS_DIR)


def run_meta(
    run_id: str,
    release_id: str,
    generations: dict[str, int],
    started_at: float,
    policy: Policy,
    sample_rate: int,
    kernels: list[str],
    clock_offsets_s: dict[str, float] | None = None,
    sandbox_hosts: list[str] | None = None,
) -> dict:
    """The run.json of a shadow run: what was armed where, under which policy, and each host's clock offset
    (seconds its clock is ahead of the operator's, as measured over SSH: the stats' times are the host's)."""
    return {
        "run_id": run_id,
        "release_id": release_id,
        "hosts": sorted(generations),
        "generations": generations,
        "started_at": started_at,
        "started_at_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started_at)),
        "policy": {"source": policy.source, "shadow": asdict(policy.shadow), "promote": asdict(policy.promote)},
        "sample_rate": sample_rate,
        "kernels": kernels,
        "clock_offsets_s": dict(clock_offsets_s or {}),
        "sandbox_hosts": sorted(sandbox_hosts or []),  # hosts served by the sandbox: reports label them
    }


class RunStore:
    """Files of one run under <reports root>/<run_id>/."""

    def __init__(self, root: str | Path | None, run_id: str):
        self.run_id = run_id
        self.dir = reports_root(root) / run_id
        self.run_file = self.dir / "run.json"
        self.verdict_file = self.dir / "verdict.json"
        self.promote_file = self.dir / "promote.jsonl"
        self.unreadable_lines = 0  # stats lines the last iter_stats skipped

    def stats_file(self, host: str, rank: int) -> Path:
        return self.dir / "stats" / host / f"rank-{rank}.jsonl"

    def save_run(self, meta: dict) -> None:
        atomic_write_text(str(self.run_file), json.dumps(meta, indent=2, sort_keys=True))

    def load_run(self) -> dict:
        return self._record(self.run_file, lambda text: load_record(text, "run.json"))

    def append_stats(self, host: str, record: StatsRecord) -> None:
        append_jsonl(str(self.stats_file(host, record.rank)), record.to_json())

    def iter_stats(self) -> Iterator[tuple[str, StatsRecord]]:
        """Yield (host, record) for every stored stats record of this run, reading each file line by line; a
        line that is not a stats record (cut short on a full disk) is skipped and counted in unreadable_lines."""
        self.unreadable_lines = 0
        stats_dir = self.dir / "stats"
        if not stats_dir.is_dir():
            return
        for host_dir in sorted(p for p in stats_dir.iterdir() if p.is_dir()):
            for path in sorted(host_dir.glob("rank-*.jsonl")):
                with open(path, errors="replace") as lines:
                    for line in lines:
                        if not line.strip():
                            continue
                        record = StatsRecord.from_line(line)
                        if record is None:
                            self.unreadable_lines += 1
                        else:
                            yield host_dir.name, record

    def append_promote(self, record: dict) -> None:
        """One probe or the outcome of a promote watch that relied on this run's verdict."""
        append_jsonl(str(self.promote_file), record)

    def promote_records(self) -> list[dict]:
        """The promote watch's records of this run (none when no promote ran from this machine)."""
        if not self.promote_file.exists():
            return []
        records = []
        with open(self.promote_file, errors="replace") as lines:
            for line in lines:
                with contextlib.suppress(ValueError):  # a line cut short is left out
                    records.append(load_record(line, "promote record"))
        return records

    def save_verdict(self, record: VerdictRecord) -> None:
        atomic_write_text(str(self.verdict_file), record.to_json())

    def load_verdict(self) -> VerdictRecord | None:
        if not self.verdict_file.exists():
            return None
        return self._record(self.verdict_file, VerdictRecord.from_json)

    def _record(self, path: Path, parse):
        """`parse(text)` of the file at `path`; ConfigError naming the file when it is not a usable record."""
        try:
            return parse(self._read(path))
        except ValueError as exc:
            raise ConfigError(f"run {self.run_id}: {path} is not a usable record ({exc})",
                              hint="run `cutover report` with another run id, or shadow again") from None

    def _read(self, path: Path) -> str:
        try:
            return path.read_text()
        except FileNotFoundError:
            raise ConfigError(
                f"run {self.run_id}: {path} not found",
                hint="run `cutover report` with a run id listed under the reports directory",
            ) from None


def latest_run_id(root: str | Path | None = None) -> str:
    """The newest run under the reports root (run ids sort by start time)."""
    base = reports_root(root)
    runs = sorted(p.name for p in base.iterdir() if (p / "run.json").exists()) if base.is_dir() else []
    if not runs:
        raise ConfigError(
            f"no shadow run found under {base}",
            hint="run `cutover shadow` first, or pass --reports-dir where the runs are",
        )
    return runs[-1]
