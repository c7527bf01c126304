"""YAML files an operator hands cutover (config, inventory, policy), read within bounds.

`yaml.safe_load` builds no Python objects from tags, but it still follows every alias (a "billion laughs"
document of a few hundred bytes expands to 10^9 values once anything walks it), recurses once per nesting level,
and builds numbers of any size. `load_yaml` refuses, with a ConfigError naming the file and the problem:

* a file larger than MAX_BYTES, or bytes that are not UTF-8;
* a document that expands (aliases followed) to more than MAX_NODES values, or nests deeper than MAX_DEPTH;
* an integer beyond 64 bits or a float that is not finite (.inf, .nan), naming where it is.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from cutover.errors import ConfigError

MAX_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 64
MAX_INT = 2**63


def load_yaml(file: Path, what: str) -> object:
    """The document of `file` (None when empty); ConfigError "<what> <file>: <problem>" for anything unusable."""
    def refuse(problem: str, hint: str = "fix the file") -> ConfigError:
        return ConfigError(f"{what} {file}: {problem}", hint=hint)

    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise refuse("file not found", "pass an existing file") from None
    except OSError as exc:
        raise refuse(f"cannot read it ({exc.strerror})", "check the path and its permissions") from None
    if len(raw) > MAX_BYTES:
        raise refuse(f"larger than {MAX_BYTES} bytes, too large for a {what} file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(f"not UTF-8 text (byte {exc.start})") from None
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, file, what)
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise refuse(f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}", "fix the YAML syntax") from None
    except RecursionError:
        raise refuse(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise refuse(f"holds a value Python cannot read ({str(exc)[:120]})") from None
    finally:
        if loader is not None:
            loader.dispose()
    _check_numbers(data, file, what)
    return data


def _check_size(root: yaml.Node, file: Path, what: str) -> None:
    """Refuse a node graph that nests deeper than MAX_DEPTH or expands to more than MAX_NODES values."""
    weights: dict[int, int] = {}

    def weight(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise ConfigError(f"{what} {file}: nested deeper than {MAX_DEPTH} levels", hint="fix the file")
        if id(node) in weights:
            return weights[id(node)]
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(weight(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(weight(key, depth + 1) + weight(value, depth + 1) for key, value in node.value)
        if total > MAX_NODES:
            raise ConfigError(f"{what} {file}: expands to more than {MAX_NODES} values (aliases followed)",
                              hint="write the values out; a few aliases are fine, nested alias expansions are not")
        weights[id(node)] = total
        return total

    weight(root, 0)


def _check_numbers(data: object, file: Path, what: str, where: str = "") -> None:
    """Refuse an integer beyond 64 bits or a non-finite float anywhere in `data`, naming its place."""
    if isinstance(data, dict):
        for key, value in data.items():
            _check_numbers(key, file, what, where)
            _check_numbers(value, file, what, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            _check_numbers(value, file, what, f"{where}[{index}]")
    elif isinstance(data, bool):
        return
    elif isinstance(data, int) and abs(data) >= MAX_INT:
        raise ConfigError(f"{what} {file}: field {where or '<top level>'!r} holds an integer out of range",
                          hint="use a number below 2**63")
    elif isinstance(data, float) and not math.isfinite(data):
        raise ConfigError(f"{what} {file}: field {where or '<top level>'!r} must be a finite number, found {data}",
                          hint="write a finite number (.inf and .nan are not accepted)")
