#!/usr/bin/env bash
# The test command: set up (idempotent), then run the whole suite; -ra lists every skip with its reason.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/integration -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -ra "$@"
