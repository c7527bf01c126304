"""The serving stack a rank reports (cutover.servingstack): its plugin digest follows the installed code, and
promote's comparison names what changed and fails closed."""

import sys

import pytest
import torch

from cutover import servingstack
from cutover.servingstack import describe, distinct_stacks, serving_stack, stack_changes

STACK = {"sglang": "0.5.23", "torch": "2.11.0", "plugin": "0123456789ab", "gpu": "NVIDIA H200"}


def test_the_plugin_digest_changes_with_any_module_of_the_plugin_code(tmp_path, monkeypatch):
    package = tmp_path / "fakeplugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "dispatch.py").write_text("LIMIT = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(servingstack, "PLUGIN_CODE", ("fakeplugin", "fakemodule"))
    (tmp_path / "fakemodule.py").write_text("RULE = 1\n")
    first = servingstack.plugin_digest()
    assert first == servingstack.plugin_digest() and len(first) == servingstack.DIGEST_CHARS
    (package / "dispatch.py").write_text("LIMIT = 2\n")
    changed = servingstack.plugin_digest()
    (package / "new_module.py").write_text("")
    added = servingstack.plugin_digest()
    (tmp_path / "fakemodule.py").write_text("RULE = 2\n")
    assert len({first, changed, added, servingstack.plugin_digest()}) == 4
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


def test_mixed_stacks_are_described():
    other = {**STACK, "gpu": "NVIDIA H100"}
    [mixed] = stack_changes([STACK], [STACK, other])
    assert mixed == (f"the run measured {describe(STACK)}; the ranks now run {describe(STACK)} | "
                     f"{describe(other)}")


@pytest.mark.parametrize("stack", [{}, {"error": "OSError: x"}, {k: v for k, v in STACK.items() if k != "plugin"}])
def test_a_stack_not_reported_unreadable_or_incomplete_never_matches_even_itself(stack):
    assert stack_changes([stack], [dict(stack)]) == [
        f"the run's ranks reported no usable serving stack ({describe(stack)})",
        f"the ranks report no usable serving stack ({describe(stack)})",
    ]
    assert stack_changes([STACK], [STACK, stack]) == [f"the ranks report no usable serving stack ({describe(stack)})"]


def test_missing_or_unreadable_records_fail_closed():
    assert "records no serving stack" in stack_changes(None, [STACK])[0]
    assert "records no serving stack" in stack_changes([], [STACK])[0]
    assert "unreadable" in stack_changes({"h1": STACK}, [STACK])[0]


def test_describe_says_why_a_stack_is_missing():
    assert describe(STACK) == "sglang 0.5.23, torch 2.11.0, plugin 0123456789ab, gpu NVIDIA H200"
    assert describe({}) == "not reported (a plugin older than the serving-stack heartbeat)"
    assert describe({"error": "OSError: x"}) == "unreadable (OSError: x)"
    assert describe({"sglang": "0.5.23"}) == "incomplete (no torch, plugin, gpu)"


def test_a_stack_that_cannot_be_read_is_reported_as_an_error_never_raised(monkeypatch):
    from cutover.plugin import runtime

    def broken(device, version):
        raise OSError("plugin directory unreadable")

    monkeypatch.setattr(runtime, "serving_stack", broken)
    stack = runtime._reported_stack(torch.device("cpu"))
    assert stack == {"error": "OSError: plugin directory unreadable"}
    assert stack_changes([STACK], [stack])  # matches no verdict
