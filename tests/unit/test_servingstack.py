"""The serving stack a rank reports (cutover.servingstack): its plugin digest follows the installed code, and
promote's comparison names what changed and fails closed."""

import sys

import torch

from cutover import servingstack
from cutover.servingstack import distinct_stacks, serving_stack, stack_changes

STACK = {"sglang": "0.5.23", "torch": "2.11.0", "plugin": "0123456789ab", "gpu": "NVIDIA H200"}


def test_the_plugin_digest_changes_with_any_module_of_the_plugin_packages(tmp_path, monkeypatch):
    package = tmp_path / "fakeplugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "dispatch.py").write_text("LIMIT = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(servingstack, "PLUGIN_PACKAGES", ("fakeplugin",))
    first = servingstack.plugin_digest()
    assert first == servingstack.plugin_digest() and len(first) == servingstack.DIGEST_CHARS
    (package / "dispatch.py").write_text("LIMIT = 2\n")
    changed = servingstack.plugin_digest()
    (package / "new_module.py").write_text("")
    assert len({first, changed, servingstack.plugin_digest()}) == 3
    sys.modules.pop("fakeplugin", None)


def test_a_cpu_rank_reports_every_field():
    stack = serving_stack(torch.device("cpu"), "0.5.23")
    assert set(stack) == set(servingstack.STACK_FIELDS)
    assert stack["sglang"] == "0.5.23" and stack["gpu"] == "none (cpu)"
    assert stack["torch"].startswith(torch.__version__)
    assert stack["plugin"] == servingstack.plugin_digest()


def test_the_same_stacks_in_any_order_are_no_change():
    other = {**STACK, "gpu": "NVIDIA H100"}
    assert stack_changes([STACK, other], [dict(other), dict(STACK)]) == []
    assert distinct_stacks([STACK, dict(STACK), {}, None]) == [STACK, {}]


def test_a_changed_field_is_named_with_both_values():
    [line] = stack_changes([STACK], [{**STACK, "sglang": "0.5.24"}])
    assert line == "the serving stack changed since the run: sglang 0.5.23 -> 0.5.24"


def test_mixed_or_missing_stacks_are_described_and_fail_closed():
    [mixed] = stack_changes([STACK], [STACK, {}])
    assert "the ranks now run" in mixed and "not reported" in mixed
    [older] = stack_changes(None, [STACK])
    assert "records no serving stack" in older
    [unreadable] = stack_changes({"h1": STACK}, [STACK])
    assert "unreadable" in unreadable


def test_a_stack_that_cannot_be_read_is_reported_as_an_error_never_raised(monkeypatch):
    from cutover.plugin import runtime

    def broken(device, version):
        raise OSError("plugin directory unreadable")

    monkeypatch.setattr(runtime, "serving_stack", broken)
    stack = runtime._reported_stack(torch.device("cpu"))
    assert stack == {"error": "OSError: plugin directory unreadable"}
    assert stack_changes([STACK], [stack])  # matches no verdict
