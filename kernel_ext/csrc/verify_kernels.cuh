// Device side of the verify attention, one file per phase of a call:
//   verify_gate.cuh      the live-switch gate: the call's enable flags from the layer's mode (its own launch)
//   verify_plan.cuh      the work plan: which key range of which request each main-kernel CTA takes
//   verify_split.cuh     what both main kernels share: the CTA's split, draft-key visibility, row stores
//   verify_mma.cuh       the split-KV main kernel on mma.sync (sm_120, and the fallback tiles)
//   verify_wgmma.cuh     the Hopper main kernel on wgmma (sm_90a image only; included by verify_api.cu)
//   verify_combine.cuh   the merge of a request's partials by their log-sum-exp
// verify_args.cuh holds what all of them share: the head dimensions, KernelArgs, output_choice (the device-side
// choice between o and the shadow scratch o_alt) and the format of the fp16 partials.
//
// Rows of request b are its draft tokens times heads, token-major: row = t * H + h, so one KV row serves every
// head and draft token of its request. A main-kernel CTA owns one tile of rows and one key range (split) of the
// request's prefix; the CTA holding a request's last split also attends to the draft tail (the draft tokens as
// keys, from k_extend/v_extend under the custom mask). A request served by one split is written to o directly;
// otherwise each split writes a normalised partial plus its log-sum-exp and the combine merges them in fp32.
// The plan is computed on the device from kv_indptr, by each main-kernel CTA at its start: no host reads, and no
// launch of its own. It reads index tensors only, so with early start it runs before the grid wait, while the
// kernel before the call finishes (cutover_verify.h, early_start).
#pragma once

#include "verify_args.cuh"
#include "verify_combine.cuh"
#include "verify_gate.cuh"
#include "verify_mma.cuh"
#include "verify_plan.cuh"
#include "verify_split.cuh"
