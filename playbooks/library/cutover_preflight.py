#!/usr/bin/python
"""Ansible module: gather and check what a kernel release needs on a host (read-only).

Returns ansible_facts.cutover_preflight = {"facts": {...}, "checks": [{"fact", "expected", "found", "ok",
"note"}]} and fails, with the same `checks` in the result, when any check does not pass. The operator side
builds its message (host, fact, expected, found) from that structured result, never from text output.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess

DOCUMENTATION = r"""
module: cutover_preflight
short_description: Check GPU arch, driver, serving environment and disk against a cutover release
options:
  gpu_arch: {type: str, required: true, description: "inventory gpu_arch (sm_120, or none for a GPU-less sandbox)"}
  archs: {type: list, elements: str, required: true, description: "archs the release was compiled for"}
  min_driver: {type: str, required: true, description: "minimum NVIDIA driver version of the release"}
  serving_python: {type: path, required: true, description: "python of the serving environment"}
  serving_kind: {type: str, required: true, choices: [sglang, sandbox], description: "what serves traffic"}
  sglang_min: {type: str, default: "0.5.11", description: "oldest supported SGLang (PEP 440 order, included)"}
  sglang_max: {type: str, default: "0.5.23", description: "newest supported SGLang (PEP 440 order, included);
    pre-releases and dev builds of SGLang are refused"}
  path: {type: path, required: true, description: "cutover_root: where the release will be written"}
  min_free_mb: {type: int, default: 512, description: "free space needed on path's filesystem"}
  needs_pip: {type: bool, default: false, description: "stage installs the plugin with `serving_python -m pip`"}
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


# PEP 440 (public versions; a local label such as +cu130 is ignored, as PEP 440 does against a public bound).
# The host's Ansible Python need not have `packaging`, so this module parses versions itself.
VERSION = re.compile(
    r"^v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_label>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre>\d+)?)?"
    r"(?:-(?P<post_implicit>\d+)|[-_.]?(?P<post_label>post|rev|r)[-_.]?(?P<post>\d+)?)?"
    r"(?:[-_.]?(?P<dev_label>dev)[-_.]?(?P<dev>\d+)?)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$",
    re.IGNORECASE,
)
PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
SGLANG_POLICY = ("supported: releases from the oldest to the newest in PEP 440 order, both included (0.5.11rc1 is "
                 "below 0.5.11, 0.5.23.post1 above 0.5.23); pre-releases (a, b, rc) and .dev builds are refused")
Version = collections.namedtuple("Version", "key prerelease")


def parse_version(text):
    """Version(key in PEP 440 order, whether a pre-release or dev build) of a version string; None if not one."""
    match = VERSION.match(str(text).strip())
    if match is None:
        return None
    g = match.groupdict()
    release = [int(part) for part in g["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()  # 1.0 == 1.0.0
    post = g["post_implicit"] or (g["post"] or "0" if g["post_label"] else None)
    if g["pre_label"]:
        pre = (PRE_RANK[g["pre_label"].lower()], int(g["pre"] or 0))
    elif g["dev_label"] and post is None:
        pre = (-1, 0)  # 1.0.dev0 sorts before 1.0a0
    else:
        pre = (3, 0)  # a final release sorts after its pre-releases
    key = (int(g["epoch"] or 0), tuple(release), pre, -1 if post is None else int(post),
           (0, int(g["dev"] or 0)) if g["dev_label"] else (1, 0))
    return Version(key, bool(g["pre_label"] or g["dev_label"]))


def at_least(found, minimum):
    """found >= minimum in PEP 440 order (False when either is not a version)."""
    found, minimum = parse_version(found), parse_version(minimum)
    return found is not None and minimum is not None and found.key >= minimum.key


def supported_sglang(found, oldest, newest):
    """found is a release from `oldest` to `newest` in PEP 440 order and neither a pre-release nor a dev build."""
    version, low, high = parse_version(found), parse_version(oldest), parse_version(newest)
    if None in (version, low, high):
        return False
    return not version.prerelease and low.key <= version.key <= high.key


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


def pip_check(serving_python):
    """Whether `serving_python -m pip` works: stage installs the plugin wheel with exactly that command."""
    out = subprocess.run([serving_python, "-m", "pip", "--version"], capture_output=True, text=True, timeout=120,
                         check=False, cwd="/")
    lines = (out.stdout or out.stderr).strip().splitlines()
    found = lines[-1] if lines else "exit status %d" % out.returncode
    ok = out.returncode == 0
    fix = "" if ok else ("install pip into that environment: `%s -m ensurepip`, or `uv pip install --python %s pip`"
                         % (serving_python, serving_python))
    return check("pip of the serving python", "`%s -m pip --version` works" % serving_python, found, ok, fix)


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
    arch_ok = found == [declared.rstrip("a")]
    cubins_ok = all(arch in cubins for arch in found)
    results = [  # a fix is a note only where its check failed: stage prints the notes of passed checks
        check("gpu compute capability", declared, ", ".join(found), arch_ok,
              "" if arch_ok else "the inventory's gpu_arch must match the host's GPUs"),
        check("release archs", "includes " + declared, ", ".join(params["archs"]), cubins_ok,
              "" if cubins_ok else "rebuild with `cutover build --arch " + declared + "`"),
    ]
    drivers = sorted({g[1] for g in gpus})
    results.append(check("driver version", ">= " + params["min_driver"], ", ".join(drivers),
                         all(at_least(driver, params["min_driver"]) for driver in drivers)))
    return results


def serving_checks(params, env):
    if env is None:
        return [check("serving python", "a working python", params["serving_python"] + " (missing or broken)", False)]
    results = [check("serving python version", ">= 3.10", env["python"], at_least(env["python"], "3.10"))]
    span = params["sglang_min"] + " .. " + params["sglang_max"]
    if params["serving_kind"] == "sglang" or env.get("sglang"):
        sglang = env.get("sglang")
        ok = sglang is not None and supported_sglang(sglang, params["sglang_min"], params["sglang_max"])
        results.append(check("sglang version", span, sglang or "not installed", ok,
                             "" if ok else SGLANG_POLICY + ": install a supported SGLang release"))
    else:
        results.append(check("sglang version", span + " (optional for the sandbox)", "not installed", True))
    return results


def main():
    # Imported here, not at the top: importing ansible.module_utils.basic patches sys.intern, and the unit tests
    # import this module's version checks into a process that also runs torch.
    from ansible.module_utils.basic import AnsibleModule

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
            "needs_pip": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    gpus = query_gpus()
    env = probe_python(params["serving_python"])
    free = free_mb(params["path"])
    checks = gpu_checks(params, gpus or [])
    checks += serving_checks(params, env)
    if params["needs_pip"] and env is not None:  # a broken python is already named by serving_checks
        checks.append(pip_check(params["serving_python"]))
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
