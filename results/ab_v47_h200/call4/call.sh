#!/usr/bin/env bash
# Full benchmark of v47 with SGLang's kernels, then v46 and v47 in plain stream order (ours only). This call ran these
# steps inline; they are now kernel_ext/device/release_bench_call.sh, unchanged but for the version names.
NEW=v47 BASE=v46 bash kernel_ext/device/release_bench_call.sh
