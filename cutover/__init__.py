"""cutover: take a custom CUDA attention kernel from benchmark to live SGLang traffic, safely."""

__version__ = "0.1.0"
