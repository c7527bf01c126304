"""CPU checks of the kernel's Python surface: argument checking, unsupported cases, build and loader contract.

verify_attention checks in a fixed order (unsupported features, arch, dtype, device, layout, shape, index
dtype); on a CPU machine the device check is the first that a well-formed call reaches, so every test here
can tell "declined" (False) from "checked and refused" (ValueError) without a GPU.
"""
from __future__ import annotations

import ctypes
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernel_ext import api, build  # noqa: E402
from kernel_ext import _lib  # noqa: E402
from kernel_ext.gpu_parity import make_case  # noqa: E402


@pytest.fixture
def case():
    return make_case(8, 4, 2, [5, 0], "tree", device="cpu", seed=1)


@pytest.mark.parametrize("kwargs", [
    dict(logit_cap=30.0), dict(sliding_window_size=128), dict(sinks=torch.zeros(8)),
    dict(window_kv_offsets=torch.zeros(2, dtype=torch.int32)), dict(xai_temperature_len=4096),
    dict(lse_extend=torch.zeros(8, 8)), dict(skip_prefix=True), dict(skip_extend=True), dict(page_size=64),
    dict(score_mod=lambda *a: a[0]), dict(aux_tensors=[torch.zeros(1)]), dict(identity_kv_indices=True),
    dict(skip_prefix_custom_mask=False), dict(some_future_sglang_kwarg=1),
])
def test_unserved_features_decline_instead_of_raising(case, kwargs):
    assert api.verify_attention(*case.args(), **kwargs) is False


def test_well_formed_call_on_cpu_is_refused_naming_the_device(case):
    with pytest.raises(ValueError, match=r"q_extend is on cpu; every tensor must be on the same CUDA device"):
        api.verify_attention(*case.args())


def test_non_float_query_names_the_argument(case):
    args = list(case.args())
    args[0] = torch.zeros(args[0].shape, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"q_extend must be a floating-point tensor"):
        api.verify_attention(*args)


def test_fp16_or_fp8_kv_is_declined_not_refused(case):
    args = list(case.args())
    args[4] = args[4].to(torch.float16)
    assert api.verify_attention(*args) is False


def test_bad_mask_dtype_names_custom_mask(case):
    args = list(case.args())
    args[9] = case.custom_mask.to(torch.float32)
    with pytest.raises(ValueError, match=r"custom_mask must be bool, int8 or uint8"):
        api.verify_attention(*args)


def test_non_tensor_argument_is_named(case):
    args = list(case.args())
    args[7] = [0, 5, 5]
    with pytest.raises(ValueError, match=r"kv_indptr must be a torch.Tensor"):
        api.verify_attention(*args)


def test_early_start_must_be_a_bool(case):
    with pytest.raises(ValueError, match=r"early_start must be True or False, got 1"):
        api.verify_attention(*case.args(), early_start=1)


def test_importing_kernel_ext_does_not_import_torch():
    code = "import sys, kernel_ext; print(kernel_ext.ABI_VERSION, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(build.ABI_VERSION), "False"]


def test_abi_version_agrees_with_header():
    header = (build.CSRC / "cutover_verify.h").read_text()
    assert int(re.search(r"#define CUTOVER_ABI_VERSION (\d+)", header).group(1)) == build.ABI_VERSION


def test_ctypes_params_mirror_the_header_field_by_field():
    header = (build.CSRC / "cutover_verify.h").read_text()
    body = header[header.index("typedef struct CutoverVerifyParams {"):header.index("} CutoverVerifyParams;")]
    fields = re.findall(r"^\s*(?:const\s+)?[\w]+\*?\s+\*?(\w+);", body, flags=re.M)
    assert fields == [name for name, _ in _lib.VerifyParams._fields_]


def test_gencode_adds_ptx_of_the_newest_arch():
    flags, targets = build._gencode_flags(("sm_90a", "sm_120"))
    assert flags == ["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_120,code=sm_120",
                     "-gencode=arch=compute_120,code=compute_120"]
    assert targets == "sm_90a,sm_120,compute_120"


def test_bad_arch_and_missing_nvcc_raise_build_errors(monkeypatch, tmp_path):
    with pytest.raises(build.KernelBuildError, match="bad arch 'compute_120'"):
        build._gencode_flags(("compute_120",))
    monkeypatch.setenv(build.NVCC_ENV, str(tmp_path / "no-nvcc"))
    with pytest.raises(build.KernelBuildError, match="does not exist: fix CUTOVER_NVCC or PATH"):
        build.nvcc_version()
    assert not list(tmp_path.iterdir())


def test_profiling_code_exists_only_in_the_profiling_build(release, tmp_path, capsys):
    """`--profile` compiles the phase marks (device code reading %globaltimer, the g_phase array) and their entry
    point in; a release holds none of them."""
    assert build.main(["--profile", "--arch", "sm_90a", "--out", str(tmp_path)]) == 0
    profile_lib = Path(capsys.readouterr().out.strip())
    release_lib = release / build.LIBRARY_NAME
    assert profile_lib == tmp_path / build.LIBRARY_NAME
    assert hasattr(ctypes.CDLL(str(profile_lib)), "cutover_debug_phase_times")
    assert not hasattr(ctypes.CDLL(str(release_lib)), "cutover_debug_phase_times")
    for marker in (b"g_phase", b"globaltimer"):
        assert marker in profile_lib.read_bytes()
        assert marker not in release_lib.read_bytes()


def test_library_path_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv(_lib.LIB_ENV, raising=False)
    monkeypatch.setenv(_lib.ROOT_ENV, str(tmp_path))
    assert _lib.default_library_path() == Path(_lib.__file__).resolve().parent / "build" / build.LIBRARY_NAME
    (tmp_path / "current").mkdir()
    (tmp_path / "current" / build.LIBRARY_NAME).write_bytes(b"")
    assert _lib.default_library_path() == tmp_path / "current" / build.LIBRARY_NAME
    monkeypatch.setenv(_lib.LIB_ENV, "/explicit/lib.so")
    assert _lib.default_library_path() == Path("/explicit/lib.so")


def test_missing_library_says_how_to_build(tmp_path):
    with pytest.raises(_lib.KernelLibraryError, match="does not exist: build it"):
        _lib.KernelLibrary(tmp_path / build.LIBRARY_NAME)


def test_uneven_draft_counts_are_declined(case):
    args = list(case.args())
    args[12] = case.max_len_extend + 1  # SGLang's max_len_extend is the longest extend: lengths differ
    assert api.verify_attention(*args) is False


def test_an_empty_custom_mask_is_declined_not_read_as_no_mask(case):
    """torch gives an empty tensor a null data pointer, which the library would take for "no mask"."""
    args = list(case.args())
    args[9] = case.custom_mask[:0]
    assert api.verify_attention(*args) is False


def test_a_call_without_requests_is_declined(case):
    args = list(case.args())
    args[0], args[6] = args[0][:0], args[6][:1]  # no query rows, qo_indptr = [0]
    args[1], args[2], args[3] = args[1][:0], args[2][:0], args[3][:0]
    args[7] = args[7][:1]
    assert api.verify_attention(*args) is False


def test_shadow_counter_layout_agrees_with_header():
    header = (build.CSRC / "cutover_verify.h").read_text()
    body = header[header.index("enum CutoverShadowCounter {"):]
    body = body[:body.index("};")]
    in_header = {name: int(value) for name, value in re.findall(r"CUTOVER_COUNTER_(\w+) = (\d+)", body)}
    in_python = {name[len("COUNTER_"):]: getattr(_lib, name) for name in dir(_lib) if name.startswith("COUNTER_")}
    assert in_header == in_python and len(in_header) == 10
    assert float(re.search(r"#define CUTOVER_NONFINITE_SENTINEL (\S+)", header).group(1)) == _lib.NONFINITE_SENTINEL
    assert int(re.search(r"#define CUTOVER_SHADOW_WORKSPACE_BYTES (\d+)", header).group(1)) == \
        _lib.SHADOW_WORKSPACE_BYTES


def test_o_alt_of_another_dtype_is_named(case):
    out = case.fresh_output()
    with pytest.raises(ValueError, match=r"o_alt must be a tensor of o_extend's dtype"):
        api.verify_attention(*case.args(out), o_alt=out.to(torch.float16))


def test_a_call_on_another_device_runs_with_that_device_current(monkeypatch):
    """`_on_device` makes the tensors' device current around the launch and leaves a call on the current device
    alone (the two-device GPU test needs two GPUs; this checks the switch itself on any machine)."""
    entered = []

    class Current:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            entered.append(self.index)

        def __exit__(self, *exc):
            entered.append(f"left {self.index}")

    monkeypatch.setattr(api.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(api.torch.cuda, "device", Current)
    assert api._on_device(0, lambda: "same") == "same" and entered == []
    assert api._on_device(1, lambda: entered.append("launch") or "other") == "other"
    assert entered == [1, "launch", "left 1"]
