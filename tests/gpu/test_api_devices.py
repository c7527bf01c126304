"""The Python API's device handling and the kernel's row-id range, on the GPU.

* A call whose tensors live on another device than the thread's current one runs there and leaves the current
  device as it was (the C entries plan and launch for the current device; kernel_ext.api switches for them).
* Row ids reach 2^31 - 1: the wgmma kernel keeps them in 32 bits, so a pool of 2^31 rows is served (its last
  row read correctly) and a larger one declined. The pool is a 34-GB buffer whose rows overlap (row stride 8
  elements), the only way to give a tensor 2^31 rows on one GPU.
"""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.gpu


def _check_against_float64(case) -> dict:
    from kernel_ext import gpu_parity

    row = gpu_parity.run_case(case, None, {})
    assert row["served"], "verify_attention declined a case it must serve"
    assert row["passed"], row
    return row


def test_tensors_on_another_device_than_the_current_one():
    import torch

    from kernel_ext import gpu_parity

    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two CUDA devices, {torch.cuda.device_count()} present")
    torch.cuda.set_device(0)
    case = gpu_parity.make_case(8, 8, 3, 1000, "tree", torch.int32, device="cuda:1", seed=11)
    _check_against_float64(case)
    assert torch.cuda.current_device() == 0, "the call left another device current"


def _overlapping_pool(rows: int):
    """bf16 [rows, 1, 576] whose row r is elements 8r .. 8r + 575 of one random buffer (row stride 16 bytes)."""
    import torch

    storage = torch.randn((rows - 1) * 8 + 576, dtype=torch.bfloat16, device="cuda")
    return storage.as_strided((rows, 1, 576), (8, 576, 1))


def test_row_ids_up_to_2_31_minus_1_are_served_and_larger_pools_declined():
    import torch

    from kernel_ext import api, gpu_parity

    rows = api.MAX_POOL_ROWS
    assert rows == 2**31
    pool = _overlapping_pool(rows + 1)
    case = gpu_parity.make_case(8, 8, 2, 64, "tree", torch.int64, seed=12)
    ids = torch.randint(0, rows, (128,), device="cuda", dtype=torch.int64)
    ids[:4] = torch.tensor([rows - 1, rows - 2, rows - 1000, 0])
    top = pool[:rows]
    served = dataclasses.replace(case, k_buffer=top, v_buffer=top[..., :512], kv_indices=ids)
    _check_against_float64(served)
    declined = dataclasses.replace(case, k_buffer=pool, v_buffer=pool[..., :512], kv_indices=ids)
    assert api.verify_attention(*declined.args(declined.fresh_output())) is False
