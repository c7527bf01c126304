#!/usr/bin/python
"""Ansible module: gather and check what a kernel release needs on a host (read-only).

Returns ansible_facts.cutover_preflight = {"facts": {...}, "checks": [{"fact", "expected", "found", "ok",
"note"}]} and fails, with the same `checks` in the result, when any check does not pass. The operator side
builds its message (host, fact, expected, found) from that structured result, never from text output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cutover_preflight
short_description: Check GPU arch, driver, serving environment and disk against a cutover release
options:
  gpu_arch: {type: str, required: true, description: "inventory gpu_arch (sm_120, or none for a GPU-less sandbox)"}
  archs: {type: list, elements: str, required: true, description: "archs the release was compiled for"}
  min_driver: {type: str, required: true, description: "minimum NVIDIA driver version of the release"}
  serving_python: {type: path, required: true, description: "python of the serving environment"}
  serving_kind: {type: str, required: true, choices: [sglang, sandbox], description: "what serves traffic"}
  sglang_min: {type: str, default: "0.5.11", description: "oldest supported SGLang"}
  sglang_max: {type: str, default: "0.5.23", description: "newest supported SGLang"}
  path: {type: path, required: true, description: "cutover_root: where the release will be written"}
  min_free_mb: {type: int, default: 512, description: "free space needed on path's filesystem"}
"""

PROBE = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "def version(name):\n"
    "    try:\n"
    "        return metadata.version(name)\n"
    "    except metadata.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'sglang': version('sglang'),"
    " 'torch': version('torch')}))\n"
)


def version_tuple(text):
    parts = []
    for piece in str(text).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def query_gpus():
    """[(sm_XY, driver, name)] from nvidia-smi, or None when nvidia-smi is absent."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap,driver_version,name", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3:
            gpus.append(("sm_" + fields[0].replace(".", ""), fields[1], fields[2]))
    return gpus


def probe_python(serving_python):
    if not os.access(serving_python, os.X_OK):
        return None
    out = subprocess.run([serving_python, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False,
                         cwd="/")  # a package checkout in the current directory must not shadow the env
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def free_mb(path):
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    return shutil.disk_usage(probe).free // (1024 * 1024)


def check(fact, expected, found, ok, note=""):
    return {"fact": fact, "expected": expected, "found": found, "ok": bool(ok), "note": note}


def gpu_checks(params, gpus):
    declared = params["gpu_arch"]
    cubins = {a.rstrip("a") for a in params["archs"] if a.startswith("sm_")}
    if declared == "none":
        if gpus:
            return [check("gpu compute capability", "no GPU (inventory gpu_arch: none)",
                          ", ".join(sorted({g[0] for g in gpus})), False,
                          "the host has GPUs: set gpu_arch in the inventory to their arch")]
        return [check("gpu compute capability", "no GPU (inventory gpu_arch: none)", "no GPU", True,
                      "no GPU on this host: allowed because the inventory declares gpu_arch: none "
                      "(sandbox); the custom path runs the torch reference")]
    if not gpus:
        return [check("gpu compute capability", declared, "no GPU (nvidia-smi missing or failing)", False)]
    found = sorted({g[0] for g in gpus})
    results = [
        check("gpu compute capability", declared, ", ".join(found), found == [declared.rstrip("a")],
              "the inventory's gpu_arch must match the host's GPUs"),
        check("release archs", "includes " + declared, ", ".join(params["archs"]),
              all(arch in cubins for arch in found), "rebuild with `cutover build --arch " + declared + "`"),
    ]
    drivers = sorted({g[1] for g in gpus}, key=version_tuple)
    results.append(check("driver version", ">= " + params["min_driver"], drivers[0],
                         version_tuple(drivers[0]) >= version_tuple(params["min_driver"])))
    return results


def serving_checks(params, env):
    if env is None:
        return [check("serving python", "a working python", params["serving_python"] + " (missing or broken)", False)]
    results = [check("serving python version", ">= 3.10", env["python"], version_tuple(env["python"]) >= (3, 10))]
    span = params["sglang_min"] + " .. " + params["sglang_max"]
    if params["serving_kind"] == "sglang" or env.get("sglang"):
        sglang = env.get("sglang")
        ok = sglang is not None and version_tuple(params["sglang_min"]) <= version_tuple(sglang) <= version_tuple(
            params["sglang_max"])
        results.append(check("sglang version", span, sglang or "not installed", ok))
    else:
        results.append(check("sglang version", span + " (optional for the sandbox)", "not installed", True))
    return results


def main():
    module = AnsibleModule(
        argument_spec={
            "gpu_arch": {"type": "str", "required": True},
            "archs": {"type": "list", "elements": "str", "required": True},
            "min_driver": {"type": "str", "required": True},
            "serving_python": {"type": "path", "required": True},
            "serving_kind": {"type": "str", "required": True, "choices": ["sglang", "sandbox"]},
            "sglang_min": {"type": "str", "default": "0.5.11"},
            "sglang_max": {"type": "str", "default": "0.5.23"},
            "path": {"type": "path", "required": True},
            "min_free_mb": {"type": "int", "default": 512},
        },
        supports_check_mode=True,
    )
    params = module.params
    gpus = query_gpus()
    env = probe_python(params["serving_python"])
    free = free_mb(params["path"])
    checks = gpu_checks(params, gpus or [])
    checks += serving_checks(params, env)
    checks.append(check("free disk (MB)", ">= %d at %s" % (params["min_free_mb"], params["path"]), str(free),
                        free >= params["min_free_mb"]))
    facts = {"gpus": [{"arch": g[0], "driver": g[1], "name": g[2]} for g in gpus or []],
             "serving_env": env, "free_mb": free}
    failed = [c for c in checks if not c["ok"]]
    result = {"changed": False, "checks": checks, "ansible_facts": {"cutover_preflight": {"facts": facts,
                                                                                         "checks": checks}}}
    if failed:
        module.fail_json(msg="; ".join("%s: expected %s, found %s" % (c["fact"], c["expected"], c["found"])
                                       for c in failed), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
