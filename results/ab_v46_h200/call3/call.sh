#!/usr/bin/env bash
# Full benchmark of v46 with SGLang's kernels, then v45 and v46 in plain stream order (ours only). This call ran these
# steps inline; they are now kernel_ext/device/release_bench_call.sh, unchanged but for the version names.
NEW=v46 BASE=v45 bash kernel_ext/device/release_bench_call.sh
