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
PLUGIN_PACKAGES = ("cutover.plugin", "kernel_ext")  # what the plugin wheel installs and the rank imports
DIGEST_CHARS = 12


def plugin_digest() -> str:
    """sha256 (first DIGEST_CHARS hex digits) over the top-level modules of PLUGIN_PACKAGES as installed here:
    a rebuilt wheel with other code gives another digest."""
    digest = hashlib.sha256()
    for package in PLUGIN_PACKAGES:
        spec = importlib.util.find_spec(package)
        folders = list(spec.submodule_search_locations or []) if spec else []
        for folder in folders:
            for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
                with open(os.path.join(folder, name), "rb") as source:
                    digest.update(f"{package}/{name}\0".encode() + source.read() + b"\0")
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


def describe(stack: dict) -> str:
    """'sglang 0.5.23, torch 2.11.0 (CUDA 13.0), plugin 3f2a9c01d4be, gpu NVIDIA H200'; unreported fields say so."""
    if not stack:
        return "not reported (a plugin older than the serving-stack heartbeat)"
    return ", ".join(f"{name} {stack.get(name, '(not reported)')}" for name in STACK_FIELDS)


def stack_changes(recorded: list[dict] | None, current: list[dict]) -> list[str]:
    """Why the stacks a host runs now (`current`, distinct) are not those a verdict recorded for it; empty
    when they are the same. Fails closed: a verdict that recorded none cannot be shown to cover the host."""
    if recorded is None:
        return ["the verdict records no serving stack (written by an older cutover), so it cannot be shown to "
                "cover what the host runs now"]
    if not isinstance(recorded, list) or not all(isinstance(stack, dict) for stack in recorded):
        return [f"the verdict's recorded serving stacks are unreadable ({type(recorded).__name__})"]
    if sorted(map(stack_key, recorded)) == sorted(map(stack_key, current)):
        return []
    if len(recorded) == 1 and len(current) == 1:
        before, now = recorded[0], current[0]
        changed = [f"{name} {before.get(name, '(not reported)')} -> {now.get(name, '(not reported)')}"
                   for name in sorted(before.keys() | now.keys()) if before.get(name) != now.get(name)]
        return [f"the serving stack changed since the run: {'; '.join(changed)}"]
    return [f"the run measured {' | '.join(map(describe, recorded))}; the ranks now run "
            f"{' | '.join(map(describe, current))}"]
