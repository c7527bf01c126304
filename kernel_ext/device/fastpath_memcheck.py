"""Small workload for compute-sanitizer: the fused shadow epilogue and the o_alt output choice on tiny shapes.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 kernel_ext/device/fastpath_memcheck.py

Covers the gate's three modes (int32 and int64 indptr), the epilogue's three paths (exit, serve, sample;
strided o; 1 block and many) and the verify kernel writing o_alt through the single-split and the split-combine
paths. Prints one line; a sanitizer error makes the exit code 9.
"""
import torch

from cutover.hostprotocol.hostlayout import REL_L2_BIN_EDGES
from kernel_ext import _lib, api
from kernel_ext.testing import make_verify_batch


def main() -> None:
    dev = torch.device("cuda")
    edges = torch.tensor(REL_L2_BIN_EDGES, dtype=torch.float64, device=dev)
    counters = torch.zeros(_lib.COUNTER_HIST + len(REL_L2_BIN_EDGES) + 1, dtype=torch.float64, device=dev)
    workspace = torch.zeros(_lib.SHADOW_WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    enable = torch.zeros(2, dtype=torch.int32, device=dev)
    for dtype in (torch.int32, torch.int64):
        qo = torch.tensor([0, 8, 16, 24], dtype=dtype, device=dev)
        gated = torch.empty_like(qo)
        for mode in (0, 1, 2):
            api.verify_gate(torch.tensor([mode, 2, 0, 0], dtype=torch.int32, device=dev), qo, gated, enable)
    for tokens, heads in ((1, 1), (300, 16)):
        base = torch.randn(tokens, heads + 1, 512, device=dev).to(torch.bfloat16)
        o, scratch = base[:, 1:], torch.randn(tokens, heads, 512, device=dev).to(torch.bfloat16)
        for flags in ([0, 0], [1, 0], [0, 1]):
            enable.copy_(torch.tensor(flags, dtype=torch.int32))
            api.shadow_accumulate(o, scratch, enable, counters, edges, workspace)
    batch = make_verify_batch(8, 16, 2, [4096, 300], device="cuda", seed=2, qo_indptr_dtype=torch.int64,
                              mask_dtype=torch.uint8)
    for flags in ([1, 0], [0, 1], [0, 0]):
        enable.copy_(torch.tensor(flags, dtype=torch.int32))
        api.verify_attention(*batch.args(batch.fresh_output()), enable=enable, o_alt=batch.fresh_output())
    torch.cuda.synchronize()
    print("fastpath memcheck workload done; counters:", counters[: _lib.COUNTER_HIST].tolist())


if __name__ == "__main__":
    main()
