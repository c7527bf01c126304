"""kernel_ext: the tree-masked MLA verify-attention CUDA kernel, its build, C ABI wrapper and benchmarks.

Importing this package does not import torch (the operator side imports `kernel_ext.build` on machines
without it): `verify_attention` and `verify_gate` load lazily from `kernel_ext.api`.
"""
__all__ = ["ABI_VERSION", "verify_attention", "verify_gate", "workspace_bytes"]


def __getattr__(name: str):
    if name == "ABI_VERSION":
        from .build import ABI_VERSION

        return ABI_VERSION
    if name in ("verify_attention", "verify_gate", "workspace_bytes"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'kernel_ext' has no attribute {name!r}")
