#!/bin/bash
# Second device call: every GPU test on the committed tree, and the GPU memory the acceptance run takes.
# Carry .bundle/sglang and kernel_ext/build/libcutover_verify.so. Outputs under $OUT.
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/.bundle/sglang"
timeout 420 python -m pytest -q -ra -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -15 | tee "$OUT/gpu_tests.log"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 > "$OUT/smi_samples.csv" &
SAMPLER=$!
timeout 150 python - "$OUT" <<'PY' 2>&1 | tee "$OUT/acceptance_run2.txt"
import sys, tempfile
from pathlib import Path
from cutover import acceptance
from cutover.release import build_release
out = Path(sys.argv[1])
release = build_release(Path(tempfile.mkdtemp()), archs=["sm_90a"]).release
result = acceptance.run_acceptance(str(release.path), release.manifest["library"], sys.executable, 0, 900,
                                   str(out / "acceptance2.log"))
print("passed", result.passed, "|", result.summary)
PY
kill $SAMPLER
python - "$OUT/smi_samples.csv" <<'PY' | tee "$OUT/acceptance_memory.txt"
import sys
peak = {}
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 2 and parts[1].isdigit():
        peak[parts[0]] = max(peak.get(parts[0], 0), int(parts[1]))
print("peak GPU memory per process during the acceptance run (MiB):", peak)
PY
