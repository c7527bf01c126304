"""Stats lines (docs/architecture.md format), truth anchor, bounded captures, and replay of a capture."""

from __future__ import annotations

import json
import os

import pytest
import torch

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from cutover.plugin.captures import CAPTURE_FORMAT, CaptureStore, load_capture
from cutover.plugin.dispatch import verify_site
from cutover.replay import ReplayError, replay_capture
from kernel_ext.reference import reference_extend_attention_fwd
from kernel_ext.testing import make_verify_batch

LAYER_KEYS = {"calls", "compared", "rel_l2_max", "rel_l2_hist", "max_abs", "nonfinite_custom", "nonfinite_stock"}


def shadow_calls(runtime, write_control, layers=(1, 4), steps=3, seed=0):
    write_control("shadow", 1)
    runtime.control.poll_once()
    dispatcher = runtime.wrap(reference_extend_attention_fwd)
    for step in range(steps):
        batch = make_verify_batch(8, 8, 2, [30, 55], seed=seed + step)
        for layer in layers:
            with verify_site(layer):
                dispatcher(*batch.args())
    runtime.audit.drain()


def stats_lines(paths):
    with open(paths.stats_file(0)) as handle:
        return [json.loads(line) for line in handle]


def test_stats_line_has_the_documented_format_and_interval_deltas(runtime, paths, write_control):
    shadow_calls(runtime, write_control)
    runtime.drain(write=True)
    shadow_calls(runtime, write_control, steps=2, seed=10)
    runtime.drain(write=True)
    first, second = stats_lines(paths)[-2:]
    assert set(first) == {"ts", "rank", "generation", "mode", "release_id", "interval_s", "kernel", "layers", "truth"}
    assert (first["mode"], first["generation"], first["kernel"]) == ("shadow", 1, "reference (no GPU)")
    assert set(first["layers"]) == {"1", "4"} and set(first["layers"]["1"]) == LAYER_KEYS
    layer = first["layers"]["4"]
    assert len(layer["rel_l2_hist"]) == len(REL_L2_BIN_EDGES) + 1 and sum(layer["rel_l2_hist"]) == layer["compared"]
    assert (layer["calls"], second["layers"]["4"]["calls"]) == (3, 2)  # deltas, not running totals
    assert 0 < layer["rel_l2_max"] < 1e-2 and layer["nonfinite_custom"] == 0
    truth = first["truth"] + second["truth"]
    assert truth and set(truth[0]) == {"layer", "err_custom", "err_stock", "source"} and truth[0]["source"] == "eager"
    assert 0 < truth[0]["err_custom"] < 1e-2 and 0 < truth[0]["err_stock"] < 1e-2


def test_captures_are_bounded_and_keep_the_worst(tmp_path):
    store = CaptureStore(str(tmp_path), rank=0, max_count=3)
    for i, rel in enumerate([0.1, 0.5, 0.2, 0.05, 0.9, 0.3]):
        store.save({"format": CAPTURE_FORMAT, "rel_l2": rel, "layer": i})
    kept = sorted(load_capture(str(tmp_path / name))["rel_l2"] for name in os.listdir(tmp_path))
    assert kept == [0.3, 0.5, 0.9]


def test_capture_file_format_and_replay(runtime, paths, write_control, capsys):
    shadow_calls(runtime, write_control, layers=(2,), steps=2)
    names = sorted(os.listdir(paths.captures))
    assert names and names[0].startswith("rank-0-layer-2-")
    capture = load_capture(os.path.join(paths.captures, names[0]))
    assert capture["format"] == CAPTURE_FORMAT and capture["kernel"] == "reference (no GPU)"
    assert capture["stock_kernel"] == "kernel_ext.reference.reference_extend_attention_fwd"
    assert capture["args"]["k_buffer"].shape[0] == int(capture["args"]["kv_indptr"][-1])  # only the rows read
    result = replay_capture(os.path.join(paths.captures, names[0]))
    by_source = {(r.source, r.kernel): r for r in result.rows}
    assert set(by_source) == {("recorded live", "stock"), ("recorded live", "custom"), ("rerun", "stock"),
                              ("rerun", "custom")}
    for row in result.rows:
        assert 0 < row.rel_l2 < 1e-2 and row.nonfinite == 0
    # a rerun reproduces what was recorded live (same reference kernels, same inputs)
    assert by_source[("rerun", "custom")].rel_l2 == pytest.approx(by_source[("recorded live", "custom")].rel_l2)
    assert result.custom_vs_stock_live == pytest.approx(capture["rel_l2"])


def test_replay_of_a_file_that_is_not_a_capture_says_so(tmp_path):
    bogus = tmp_path / "bogus.pt"
    torch.save({"hello": 1}, bogus)
    with pytest.raises(ReplayError, match="not a cutover capture"):
        replay_capture(str(bogus))


def test_replay_cli_prints_each_error(runtime, paths, write_control):
    import typer
    from typer.testing import CliRunner

    from cutover.cli import replay

    app = typer.Typer()
    app.callback()(lambda: None)
    replay.register(app)
    shadow_calls(runtime, write_control, layers=(0,), steps=1)
    capture = os.path.join(paths.captures, os.listdir(paths.captures)[0])
    result = CliRunner().invoke(app, ["replay", capture, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert len(document["rows"]) == 4 and all(r["rel_l2"] < 1e-2 for r in document["rows"])


# -- what a rerun ran: the kernel library's release and SGLang's version (cutover/replay.py) --------------------


def fake_release(root, release_id: str, content: bytes = b"not really a library"):
    """<root>/releases/<id>/libcutover_verify.so with a manifest.json listing it; returns the library path."""
    from cutover.hostprotocol.hostlayout import sha256_file

    directory = root / "releases" / release_id
    directory.mkdir(parents=True)
    library = directory / "libcutover_verify.so"
    library.write_bytes(content)
    manifest = {"release_id": release_id, "library": library.name, "files": {library.name: sha256_file(str(library))}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return library


def test_library_release_reads_the_manifest_beside_the_resolved_library(tmp_path):
    from cutover.replay import library_release

    library = fake_release(tmp_path, "rel-a")
    (tmp_path / "current").symlink_to(library.parent)
    assert library_release(tmp_path / "current" / library.name) == ("rel-a", "release rel-a")
    library.write_bytes(b"rebuilt in place")
    release_id, identity = library_release(library)
    assert release_id is None and "differs from the sha256" in identity
    build = tmp_path / "build"
    build.mkdir()
    (build / library.name).write_bytes(b"a dev build")
    assert library_release(build / library.name) == (None, f"not a release: no manifest.json beside "
                                                           f"{(build / library.name).resolve()}")


@pytest.fixture
def capture_of_release(runtime, paths, write_control, tmp_path):
    """A capture file recorded under release rel-a (the CPU runtime records none: set as a host would)."""
    shadow_calls(runtime, write_control, layers=(3,), steps=1)
    capture = load_capture(os.path.join(paths.captures, os.listdir(paths.captures)[0]))
    capture["release_id"] = "rel-a"
    path = tmp_path / "rank-0-layer-3-1.pt"
    torch.save(capture, path)
    return str(path)


@pytest.fixture
def rerun_library(monkeypatch, tmp_path):
    """use(release_id): replay's reruns are the CPU references, labelled as if the library of release_id
    (a fake release under tmp_path/releases/) had loaded: the CUDA path's provenance logic, without a GPU."""
    import cutover.replay as replay_mod

    def use(release_id: str):
        library = tmp_path / "releases" / release_id / "libcutover_verify.so"
        if not library.exists():
            fake_release(tmp_path, release_id)
        cpu = replay_mod._kernels("cpu")
        cpu.library = str(library)
        cpu.library_release, cpu.library_identity = replay_mod.library_release(library)
        monkeypatch.setattr(replay_mod, "_kernels", lambda device: cpu)
        monkeypatch.setenv("CUTOVER_ROOT", str(tmp_path))  # where the hint finds the capture's release
        return library

    return use


def test_replay_refuses_a_library_of_another_release_and_names_both(capture_of_release, rerun_library, tmp_path):
    rerun_library("rel-a")  # the capture's release is here too, so the hint names its library's path
    rerun_library("rel-b")
    with pytest.raises(ReplayError) as raised:
        replay_capture(capture_of_release)
    message = str(raised.value)
    assert "taken under release rel-a" in message and "(release rel-b)" in message
    assert f"CUTOVER_KERNEL_LIB={tmp_path / 'releases' / 'rel-a' / 'libcutover_verify.so'}" in message
    assert "--allow-release-mismatch" in message
    result = replay_capture(capture_of_release, allow_release_mismatch=True)
    assert result.kernel_library_release == "rel-b" and result.release_id == "rel-a"
    assert len(result.warnings) == 1 and "rel-a" in result.warnings[0] and "rel-b" in result.warnings[0]
    assert [r.implementation for r in result.rows if r.source == "rerun"][1].endswith("(release rel-b)")


def test_replay_of_the_capture_s_release_has_no_warning(capture_of_release, rerun_library):
    library = rerun_library("rel-a")
    result = replay_capture(capture_of_release)
    assert result.warnings == [] and (result.kernel_library, result.kernel_library_release) == (str(library), "rel-a")


def test_replay_refuses_a_library_that_is_not_a_release(capture_of_release, rerun_library, tmp_path):
    fake_release(tmp_path, "rel-a").write_bytes(b"rebuilt in place")  # a dev build over the release's file
    rerun_library("rel-a")
    with pytest.raises(ReplayError, match="differs from the sha256"):
        replay_capture(capture_of_release)


def test_replay_cli_prints_the_library_its_release_and_the_mismatch_warning(capture_of_release, rerun_library):
    import typer
    from typer.testing import CliRunner

    from cutover.cli import replay

    app = typer.Typer()
    app.callback()(lambda: None)
    replay.register(app)
    library = rerun_library("rel-b")
    refused = CliRunner().invoke(app, ["replay", capture_of_release])
    assert refused.exit_code != 0 and isinstance(refused.exception, ReplayError)
    table = CliRunner().invoke(app, ["replay", capture_of_release, "--allow-release-mismatch"])
    assert table.exit_code == 0, table.output
    assert "captured under release rel-a" in table.output
    assert f"custom rerun: kernel library {library} (release rel-b)" in table.output
    warning = [line for line in table.output.splitlines() if line.startswith("WARNING: ")]
    assert len(warning) == 1 and "release rel-a" in warning[0] and "(release rel-b)" in warning[0]
    document = CliRunner().invoke(app, ["replay", capture_of_release, "--allow-release-mismatch", "--json"])
    assert document.exit_code == 0
    parsed = json.loads(document.stdout)
    assert (parsed["release_id"], parsed["kernel_library"], parsed["kernel_library_release"]) == (
        "rel-a", str(library), "rel-b")
    assert len(parsed["warnings"]) == 1 and "WARNING: " in document.stderr


def test_cuda_rerun_names_the_loaded_library_and_the_sglang_version(monkeypatch, tmp_path):
    """_kernels("cuda") wiring without a GPU: SGLang's kernel and the library load are stubbed."""
    import types

    import cutover.plugin.hooks as hooks
    import cutover.replay as replay_mod
    from kernel_ext import _lib

    library = fake_release(tmp_path, "rel-a")
    monkeypatch.setattr(hooks, "resolve_stock_kernel", lambda: (reference_extend_attention_fwd, "sglang.x"))
    monkeypatch.setattr(_lib, "load_library", lambda: types.SimpleNamespace(path=library))
    monkeypatch.setattr(hooks, "sglang_version", lambda: "0.5.99")
    kernels = replay_mod._kernels("cuda")
    assert (kernels.library, kernels.library_release, kernels.sglang_version) == (str(library), "rel-a", "0.5.99")
    assert kernels.stock_name == "sglang.x.extend_attention_fwd"
    warnings = replay_mod._check_provenance({"release_id": "rel-a", "stock_kernel": "sglang.y.extend_attention_fwd"},
                                            kernels, False)
    assert len(warnings) == 1 and "sglang.y.extend_attention_fwd" in warnings[0] and "0.5.99" in warnings[0]


def test_cuda_replay_without_sglang_or_library_says_what_to_install(monkeypatch, tmp_path):
    import cutover.plugin.hooks as hooks
    import cutover.replay as replay_mod
    from kernel_ext import _lib

    def missing():
        raise ImportError("No module named 'sglang'")

    monkeypatch.setattr(hooks, "resolve_stock_kernel", missing)
    with pytest.raises(ReplayError, match="pip install sglang"):
        replay_mod._kernels("cuda")
    monkeypatch.setattr(hooks, "resolve_stock_kernel", lambda: (reference_extend_attention_fwd, "sglang.x"))
    monkeypatch.setattr(_lib, "_loaded", None)
    monkeypatch.setenv(_lib.LIB_ENV, str(tmp_path / "absent.so"))
    with pytest.raises(ReplayError, match="no kernel library") as raised:
        replay_mod._kernels("cuda")
    assert raised.value.hint and _lib.LIB_ENV in raised.value.hint
