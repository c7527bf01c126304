"""The engine tests' worker: one process for the session that imported Triton with TRITON_INTERPRET=1 (SGLang's
Triton kernels on the CPU), with SGLang's parallel context of a one-GPU scheduler, and the plugin loaded the way
SGLang loads it (``sglang.srt.plugins.load_plugins()`` from the installed entry point)."""

from __future__ import annotations

import multiprocessing
import os

import pytest


def _start_worker(state_dir: str, root: str) -> None:
    os.environ["CUTOVER_STATE_DIR"], os.environ["CUTOVER_ROOT"] = state_dir, root
    from armed import stage_test_release
    from cutover.hostprotocol.hostlayout import HostPaths

    stage_test_release(HostPaths(cutover_root=root, state_dir=state_dir))  # the release the rank loads
    from sglang_engine.torchvision_standin import install_if_missing

    install_if_missing()
    from sglang_engine.engine import enter_single_rank_context

    enter_single_rank_context()
    from sglang.srt.plugins import load_plugins

    load_plugins()


@pytest.fixture(scope="session")
def engine_worker(tmp_path_factory):
    """``engine_worker(function, *args)`` runs a function of tests/sglang_engine/scenarios.py in the worker and
    returns its result (its exception re-raised here)."""
    pytest.importorskip("sglang.srt.plugins", reason="needs SGLang (scripts/setup.sh installs it)")
    base = tmp_path_factory.mktemp("engine")
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        pool = multiprocessing.get_context("spawn").Pool(
            1, initializer=_start_worker, initargs=(str(base / "state"), str(base / "root")))
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous

    def run(function, *args):
        return pool.apply(function, args)

    yield run
    pool.terminate()
    pool.join()
