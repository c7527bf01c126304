#!/usr/bin/env bash
# Set up everything cutover and its test suite need, on a fresh Debian machine (idempotent: re-running
# installs nothing new). Used by scripts/test.sh and by the README's main-job command.
#
#   * openssh-server: the integration tests start real sshd daemons as test hosts;
#   * prometheus: the tests of PromQL gates start a real Prometheus server on loopback, scraping the sandbox;
#   * .venv: cutover (editable, with its test extra) plus the CPU stack the parity tests and the sandbox use:
#     torch (CPU build, pinned: an open range would download a multi-GB CUDA build), triton (its interpreter
#     runs SGLang's Triton kernels on CPU), and SGLang installed --no-deps with only the light packages its
#     attention kernels, attention backends and model runner import (torchvision excepted: PyPI has only CUDA
#     builds of it; tests/sglang_engine serves it from a labelled stand-in). Versions come from
#     scripts/constraints.txt, the set known to work together.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null; then
    echo "setup: installing openssh-server (test hosts)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssh-server
fi

if ! command -v prometheus >/dev/null; then
    echo "setup: installing prometheus (PromQL gate tests)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv .venv
fi

PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check -c scripts/constraints.txt)
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" triton orjson psutil pybase64 pillow starlette msgspec pyzmq pydantic tqdm ipython aiohttp
# SGLang goes in --no-deps: every later install makes pip print each of its server dependencies as a conflict.
# That list is left out (the line below says why); anything else pip says is shown, and a failure stops setup.
without_sglang_conflicts() {
    local log status=0
    log=$(mktemp)
    "$@" 2>"$log" || status=$?
    grep -v -e "^sglang [^ ]* requires " \
        -e "^ERROR: pip's dependency resolver does not currently take into account all the packages" "$log" >&2 || true
    rm -f "$log"
    return "$status"
}
"${PIP[@]}" --no-deps "sglang==0.5.23"
# what SGLang's TritonAttnBackend and ModelRunner modules import (tests/sglang_engine builds them on the CPU)
without_sglang_conflicts "${PIP[@]}" transformers dill sentencepiece apache-tvm-ffi compressed-tensors gguf openai \
    partial-json-parser einops uvicorn fastapi
echo "setup: SGLang is installed --no-deps on purpose (its server dependencies are not needed here)"
without_sglang_conflicts "${PIP[@]}" -e '.[test]'
echo "setup: done ($(.venv/bin/python -c 'import torch, sglang; print("torch", torch.__version__, "sglang", sglang.__version__)'))"
