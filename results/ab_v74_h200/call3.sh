#!/usr/bin/env bash
# Call 3: the release checks of the tree's library (v75f's kernels as v75, both archs, carried as
# kernel_ext/build/libcutover_verify.so): every gpu test, the full parity grid in both configurations, memcheck and
# synccheck of the long-request and longest-first tests (memcheck ran past its 90 s then: call 4).
set -uo pipefail
mkdir -p $OUT/r
BUILD=0 TAG=v75 OUT=$OUT/r SANITIZE_K="long_request or spread_lengths" SANITIZE_S=90 bash kernel_ext/device/final_call.sh
(cd $OUT && tar czf 0_all.tgz r)
