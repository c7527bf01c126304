"""Kernel acceptance on a host's own GPU, before a release goes live there.

From `cutover stage` on, every target-verify step of the serving process launches the release's kernel, even in
mode triton (the captured switch launches it, and it exits once its plan is done). So stage first runs the
release's GPU parity subset on the host, in a process of its own: the serving Python (its torch, and its SGLang,
whose Triton kernel is the reference) with the release's own kernel_ext code (`<release>/python`) and library,
on one GPU. A kernel that faults, leaves outputs unwritten, or strays from SGLang's kernel on this GPU is
refused there, before `current` points at it and before any serving process loads it.

A pass is recorded with the sha256 of the library it ran, and counts only for those bytes: the release id names
the sources, not the binary (two builds of the same sources differ), so another build under the same id is
checked again.

Standard library only: playbooks/library/cutover_acceptance.py runs this on the host (a module_utils link).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import TextIO

PYTHON_DIR = "python"  # the release's kernel_ext code (acceptance, benchmark), on PYTHONPATH for the run
PARITY_SUBSET = "tiny"
LOG_TAIL_LINES = 25
CASES_NAMED = 3  # failed cases named in a summary
MPS_PIPE_ENV, MPS_DEFAULT_PIPE = "CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"


@dataclass(frozen=True)
class Acceptance:
    """The outcome of one acceptance run: passed, a one-line summary, and the parity report (None if none)."""

    passed: bool
    summary: str
    seconds: float
    report: dict | None = None


def parity_command(serving_python: str, report_path: str) -> list[str]:
    return [serving_python, "-m", "kernel_ext.gpu_parity", "--subset", PARITY_SUBSET, "--json", report_path]


def parity_env(release_dir: str, library: str, device: int, base: dict) -> dict:
    """The environment of the run: the release's kernel_ext first on the path, its library, one GPU."""
    env = dict(base)
    release_dir = os.path.abspath(release_dir)  # the run's working directory is the release itself
    python_dir = os.path.join(release_dir, PYTHON_DIR)
    env["PYTHONPATH"] = python_dir + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    env["CUTOVER_KERNEL_LIB"] = os.path.join(release_dir, library)
    env["CUDA_VISIBLE_DEVICES"] = str(device)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the release directory stays as its manifest lists it
    return env


def _case_name(case: dict) -> str:
    return (f"H{case.get('H')} T{case.get('T')} batch {case.get('batch')} prefix {case.get('prefix')} "
            f"{case.get('mask')}: {case.get('detail') or ('not served' if not case.get('served') else 'error')}")


def judge(report: dict) -> tuple[bool, str]:
    """Whether a kernel_ext.gpu_parity report accepts the kernel, and one line saying what ran and what failed."""
    problems = []
    failed = [c for c in report.get("cases", []) if not c.get("passed")]
    if failed:
        problems.append(f"{len(failed)} failed case(s): " + "; ".join(_case_name(c) for c in failed[:CASES_NAMED]))
    elif not report.get("total"):
        problems.append("no parity case ran")
    failed_checks = [c.get("check", "?") for c in report.get("checks", []) if not c.get("passed")]
    if failed_checks:
        problems.append("failed live-switch check(s): " + ", ".join(failed_checks))
    elif not report.get("checks_total"):
        problems.append("no live-switch check ran")
    if not report.get("triton_reference"):
        problems.append("SGLang's Triton kernel is not importable by the serving Python, so the kernel was not "
                        "compared with it")
    ratio = report.get("worst_ratio")
    summary = (f"{report.get('passed')}/{report.get('total')} parity cases and {report.get('checks_passed')}/"
               f"{report.get('checks_total')} live-switch checks on {report.get('gpu')}"
               + (f", worst error {ratio:.3f}x SGLang's kernel's" if isinstance(ratio, (int, float)) else ""))
    return not problems, summary + ("; " + "; ".join(problems) if problems else "")


def recorded_pass(record: dict | None, release_id: str, library_sha256: str | None) -> tuple[bool, str]:
    """Whether a stored acceptance record covers the library now in the release: (covered, why not). `why not`
    is empty unless a pass is stored for this id and the release holds a library other than the one it ran."""
    if (not isinstance(record, dict) or not record.get("passed") or record.get("release_id") != release_id
            or library_sha256 is None):
        return False, ""
    accepted = record.get("library_sha256")
    if accepted == library_sha256:
        return True, ""
    return False, (f"the acceptance recorded for release {release_id} ran library sha256 {accepted or '(not recorded)'}"
                   f", this build's library is {library_sha256}: another build, so it runs again")


def mps_control_pipe(env: dict) -> str | None:
    """The control pipe of a CUDA MPS daemon serving this host's clients, or None. Under MPS a fatal fault of one
    client reaches every client on its GPU, so a faulting acceptance run would take serving ranks with it."""
    path = os.path.join(env.get(MPS_PIPE_ENV) or MPS_DEFAULT_PIPE, "control")
    return path if os.path.exists(path) else None


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


@dataclass
class RunLock:
    """`<log_path>.lock`, for one acceptance run of a release. `busy`: why another run holds it (None: this one
    does, through `handle`)."""

    busy: str | None
    handle: TextIO | None = None

    def record(self, pid: int) -> None:
        """Name the process that runs the parity check in the lock file (the message a second run gives)."""
        self.handle.seek(0)
        self.handle.truncate(0)
        self.handle.write(f"pid {pid}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        self.handle.flush()


@contextlib.contextmanager
def exclusive_run(log_path: str):
    """Take `<log_path>.lock` for one run (a RunLock). A stage cut off (Ctrl-C, a dropped SSH session) leaves its
    parity run going on the host: a second one on the same GPU would share its log and report files, and double
    the memory beside serving. The parity process inherits the lock, so it holds it while it runs, whatever
    happens to the process that started it."""
    with open(log_path + ".lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown pid"
            yield RunLock(f"an acceptance run of this release is still running on the host ({holder}), probably "
                          f"from a stage that was cut off: wait for it to end (its log: {log_path}), then stage again")
            return
        lock = RunLock(None, handle)
        lock.record(os.getpid())
        yield lock  # released when the file is closed here and in the parity process


def run_acceptance(release_dir: str, library: str, serving_python: str, device: int, timeout_s: float,
                   log_path: str) -> Acceptance:
    """Run the parity subset with the release on GPU `device`, one run per release at a time; its output goes to
    `log_path`."""
    with exclusive_run(log_path) as lock:
        if lock.busy:
            return Acceptance(False, lock.busy, 0.0)
        return _run_parity(release_dir, library, serving_python, device, timeout_s, log_path, lock)


def _run_parity(release_dir: str, library: str, serving_python: str, device: int, timeout_s: float,
                log_path: str, lock: RunLock) -> Acceptance:
    report_path = log_path + ".report.json"
    if os.path.exists(report_path):
        os.unlink(report_path)
    env = parity_env(release_dir, library, device, dict(os.environ))
    started = time.monotonic()
    with open(log_path, "w") as log:
        try:
            process = subprocess.Popen(parity_command(serving_python, report_path), env=env, cwd=release_dir,
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, pass_fds=(lock.handle.fileno(),))
        except OSError as exc:
            return Acceptance(False, f"the serving Python {serving_python} could not be started: {exc}", 0.0)
        lock.record(process.pid)
        try:
            status = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return Acceptance(False, f"the parity run did not finish within {timeout_s:g} s and was killed",
                              time.monotonic() - started)
    seconds = time.monotonic() - started
    try:
        with open(report_path) as handle:
            report = json.load(handle)
        os.unlink(report_path)
    except (OSError, ValueError):
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        return Acceptance(False, f"the parity run {how} before writing its report", seconds)
    passed, summary = judge(report)
    if status != 0 and passed:
        passed, summary = False, summary + f"; but the parity run exited with status {status}"
    return Acceptance(passed, f"{summary} ({seconds:.0f} s)", seconds, report)
