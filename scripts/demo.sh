#!/usr/bin/env bash
# The main job against the embedded default (inventories/local.yml: a sandbox server on this machine, labelled
# as such in every output): set up, build the kernel release, stage it, shadow it for two minutes under the
# sandbox policy, promote it with a one-minute guarded watch, roll back to Triton, and print the report path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

cutover build
cutover stage --yes
cutover status
cutover shadow --minutes 2 --policy checks/policies/sandbox.yml
cutover promote --watch-minutes 1 --policy checks/policies/sandbox.yml
cutover status
cutover rollback
cutover sandbox down
cutover report
