#!/bin/bash
# One device call: stage's kernel acceptance (cutover/acceptance.py) on the H200 with releases built from the tree.
# Carry .bundle/sglang and kernel_ext/build/libcutover_verify.so. Outputs under $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUT/gpu.txt"
# 1. the GPU tests of the acceptance (a release for this GPU passes; one for sm_120 is refused here)
timeout 420 python -m pytest -q -ra -p no:cacheprovider tests/gpu/test_acceptance.py 2>&1 | tee "$OUT/pytest_gpu_acceptance.log"
# 2. the acceptance as stage runs it on a host, its report kept
timeout 300 python - "$OUT" <<'PY' 2>&1 | tee "$OUT/acceptance_run.txt"
import json, sys, tempfile
from pathlib import Path
from cutover import acceptance
from cutover.release import build_release
out = Path(sys.argv[1])
release = build_release(Path(tempfile.mkdtemp()), archs=["sm_90a"]).release
result = acceptance.run_acceptance(str(release.path), release.manifest["library"], sys.executable, 0, 900,
                                   str(out / "acceptance.log"))
(out / "acceptance_report.json").write_text(json.dumps(result.report, indent=1))
print("release", release.release_id, "passed", result.passed)
print(result.summary)
PY
