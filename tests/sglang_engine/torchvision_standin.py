"""A labelled stand-in for torchvision in the engine worker (not SGLang, not cutover).

SGLang's config package imports torchvision at import time for multimodal preprocessing (``internvl_utils``,
``deepseek_ocr``; transformers' processors likewise), which the attention path never runs. PyPI's torchvision
wheels are CUDA builds whose extension does not load against the CPU torch these tests use, and no CPU build is
reachable from a plain pip install; so, only where ``import torchvision`` fails, the worker serves every
``torchvision.*`` module from this stand-in: each name in it is a placeholder that raises when called, so any
use outside import says what is missing instead of computing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

PACKAGE = "torchvision"


class _Missing:
    """A torchvision name the engine tests never use: raises when called; its attributes are placeholders too."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name} is a stand-in: torchvision is not installed in the engine tests")

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")


class _StandInModule(types.ModuleType):
    __version__ = "0.0+standin"

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE or fullname.startswith(PACKAGE + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install_if_missing() -> bool:
    """Serve torchvision from the stand-in where it cannot be imported; True when it does."""
    try:
        import torchvision  # noqa: F401
        return False
    except Exception:  # noqa: BLE001 - a missing or broken torchvision alike
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
    sys.meta_path.insert(0, _StandInFinder())
    return True
