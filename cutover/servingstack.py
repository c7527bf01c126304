"""The serving stack a rank runs the release in: SGLang, torch, the plugin's own Python and the GPU.

The release id pins the kernel library and its kernel_ext Python, not what surrounds it. Each rank reports its
stack in every heartbeat; a shadow verdict records the stacks each host ran during the run, and promote
refuses a verdict measured on another stack (an SGLang or torch upgrade, a rebuilt plugin wheel, another GPU)
since the run (`stack_changes`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os

STACK_FIELDS = ("sglang", "torch", "plugin", "gpu")
# the code a rank runs of the plugin wheel: packages (their top-level modules) and single modules
PLUGIN_CODE = ("cutover.plugin", "kernel_ext", "cutover.hostprotocol.hostlayout", "cutover.servingstack")
DIGEST_CHARS = 12


def _source_files(name: str) -> list[str]:
    """The installed source of package or module `name`: a package's top-level .py files, a module's file."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return []
    if spec.submodule_search_locations is None:
        return [spec.origin] if spec.origin else []
    return [os.path.join(folder, file) for folder in spec.submodule_search_locations
            for file in sorted(f for f in os.listdir(folder) if f.endswith(".py"))]


def plugin_digest() -> str:
    """sha256 (first DIGEST_CHARS hex digits) over PLUGIN_CODE's source as installed here: a rebuilt wheel with
    other code gives another digest."""
    digest = hashlib.sha256()
    for name in PLUGIN_CODE:
        for path in _source_files(name):
            with open(path, "rb") as source:
                digest.update(f"{name}/{os.path.basename(path)}\0".encode() + source.read() + b"\0")
    return digest.hexdigest()[:DIGEST_CHARS]


def serving_stack(device, sglang_version: str) -> dict[str, str]:
    """This process's stack on `device` (a torch.device): every STACK_FIELDS entry, as text."""
    import torch

    cuda = torch.version.cuda
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"none ({device.type})"
    return {
        "sglang": sglang_version,
        "torch": f"{torch.__version__}" + (f" (CUDA {cuda})" if cuda else ""),
        "plugin": plugin_digest(),
        "gpu": gpu,
    }


def stack_key(stack: dict) -> str:
    """A stack as one comparable string."""
    return json.dumps(stack, sort_keys=True)


def distinct_stacks(stacks) -> list[dict]:
    """The different stacks among `stacks` (an empty dict, a heartbeat from a plugin that reports none,
    counts as one), in a stable order."""
    unique = {stack_key(stack or {}): stack or {} for stack in stacks}
    return [unique[key] for key in sorted(unique)]


def unusable(stack: dict) -> str:
    """Why `stack` cannot stand for what a rank runs ("" when it can): not reported (an older plugin), an error
    reading it, or a field missing."""
    if not stack:
        return "not reported (a plugin older than the serving-stack heartbeat)"
    if "error" in stack:
        return f"unreadable ({stack['error']})"
    missing = [name for name in STACK_FIELDS if not stack.get(name)]
    return f"incomplete (no {', '.join(missing)})" if missing else ""


def describe(stack: dict) -> str:
    """'sglang 0.5.23, torch 2.11.0 (CUDA 13.0), plugin 3f2a9c01d4be, gpu NVIDIA H200', or why there is none."""
    return unusable(stack) or ", ".join(f"{name} {stack[name]}" for name in STACK_FIELDS)


def stack_changes(recorded: list[dict] | None, current: list[dict]) -> list[str]:
    """Why the stacks a host runs now (`current`, distinct) are not shown to be those a verdict recorded for it;
    empty when they are the same usable stacks. Fails closed: a verdict that recorded none, or a stack not
    reported, unreadable or incomplete on either side, cannot show that the run covers what the host runs."""
    if not recorded:
        return ["the verdict records no serving stack for this host (written by an older cutover), so it cannot "
                "be shown to cover what the host runs now"]
    if not isinstance(recorded, list) or not all(isinstance(stack, dict) for stack in recorded):
        return [f"the verdict's recorded serving stacks are unreadable ({type(recorded).__name__})"]
    problems = []
    for stacks, whose in ((recorded, "the run's ranks reported"), (current, "the ranks report")):
        unusable_ones = [describe(stack) for stack in stacks if unusable(stack)]
        if unusable_ones:
            problems.append(f"{whose} no usable serving stack ({'; '.join(unusable_ones)})")
    if problems:
        return problems
    if sorted(map(stack_key, recorded)) == sorted(map(stack_key, current)):
        return []
    if len(recorded) == 1 and len(current) == 1:
        before, now = recorded[0], current[0]
        changed = [f"{name} {before.get(name, '(not reported)')} -> {now.get(name, '(not reported)')}"
                   for name in sorted(before.keys() | now.keys()) if before.get(name) != now.get(name)]
        return [f"the serving stack changed since the run: {'; '.join(changed)}"]
    return [f"the run measured {' | '.join(map(describe, recorded))}; the ranks now run "
            f"{' | '.join(map(describe, current))}"]
