"""Gate policies: load a YAML file, validate every field, and say exactly which file and field is wrong.

A policy file may set any subset of the fields of `checks/policies/default.yml`; fields it leaves out keep
the default's value. Unknown fields are refused (a misspelt threshold must never silently fall back to the
default). A top-level `scope: sandbox` marks a policy that may gate only sandbox hosts; a policy looser than the
default must declare its scope (`sandbox`, or `any` on purpose) to gate any other host (`refuse_out_of_scope`).
See docs/gates.md for what each threshold means and how the defaults were calibrated.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path


from checks.prometheus_policy import PrometheusPolicy, parse_section
from cutover.errors import ConfigError
from cutover.hostprotocol.hostlayout import short_repr
from cutover.safeyaml import load_yaml

DEFAULT_POLICY_PATH = Path(__file__).resolve().parent / "policies" / "default.yml"
POLICY_VERSION = 1
# Which hosts a policy may gate: `any`, or only hosts whose inventory serving_kind is "sandbox".
SCOPE_ANY = "any"
SCOPE_SANDBOX = "sandbox"
SCOPES = (SCOPE_ANY, SCOPE_SANDBOX)
SANDBOX_SERVING_KIND = "sandbox"


@dataclass(frozen=True)
class ShadowPolicy:
    """Thresholds a shadow run must meet. Divergence thresholds apply to every layer separately."""

    min_duration_s: float
    min_compared_calls: int
    rel_l2_p99: float
    rel_l2_max: float
    max_abs: float
    max_nonfinite: int
    truth_anchor_k: float
    truth_anchor_floor: float
    truth_anchor_min_samples: int
    max_silence_s: float
    max_unclean_restarts: int


@dataclass(frozen=True)
class PromotePolicy:
    """How `cutover promote` watches a host after flipping it to custom, against the shadow baseline."""

    watch_minutes: float
    probe_interval_s: float
    max_failed_probes: int
    min_verify_rate_ratio: float
    max_new_errors: int
    min_accept_length_ratio: float


@dataclass(frozen=True)
class Policy:
    source: str
    shadow: ShadowPolicy
    promote: PromotePolicy
    scope: str = SCOPE_ANY
    scope_declared: bool = True  # False: the policy file left `scope` out and took the default's
    prometheus: PrometheusPolicy | None = None  # PromQL gates (the `prometheus:` section), none by default


# Per field: (python type, lower bound, lower bound inclusive?). Floats must be finite.
_BOUNDS = {
    "min_duration_s": (float, 0.0, True),
    "min_compared_calls": (int, 0, True),
    "rel_l2_p99": (float, 0.0, False),
    "rel_l2_max": (float, 0.0, False),
    "max_abs": (float, 0.0, False),
    "max_nonfinite": (int, 0, True),
    "truth_anchor_k": (float, 1.0, True),
    "truth_anchor_floor": (float, 0.0, True),
    "truth_anchor_min_samples": (int, 0, True),
    "max_silence_s": (float, 0.0, False),
    "max_unclean_restarts": (int, 0, True),
    "watch_minutes": (float, 0.0, False),
    "probe_interval_s": (float, 0.0, False),
    "max_failed_probes": (int, 1, True),
    "min_verify_rate_ratio": (float, 0.0, True),
    "max_new_errors": (int, 0, True),
    "min_accept_length_ratio": (float, 0.0, True),
}
_SECTIONS = {"shadow": ShadowPolicy, "promote": PromotePolicy}


def _fail(source: str, field: str, problem: str) -> ConfigError:
    return ConfigError(
        f"policy {source}: field '{field}' {problem}",
        hint=f"edit '{field}' in {source} (see {DEFAULT_POLICY_PATH.name} and docs/gates.md for the meaning)",
    )


def _check_value(source: str, dotted: str, name: str, value: object) -> float | int:
    kind, low, inclusive = _BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        exponent = isinstance(value, str) and re.fullmatch(r"[-+]?\d+[eE][-+]?\d+", value.strip())
        note = f" (YAML reads {value} as text: write it with a decimal point, e.g. 5.0e-3)" if exponent else ""
        raise _fail(source, dotted, f"must be a number, got {short_repr(value)}{note}")
    if isinstance(value, int) and abs(value) > 2**53:
        raise _fail(source, dotted, "is out of range (at most 2**53)")
    if kind is int and (not float(value).is_integer()):
        raise _fail(source, dotted, f"must be a whole number, got {value!r}")
    if not math.isfinite(value):
        raise _fail(source, dotted, f"must be finite, got {value!r}")
    if value < low or (value == low and not inclusive):
        relation = ">=" if inclusive else ">"
        raise _fail(source, dotted, f"must be {relation} {low}, got {value!r}")
    return kind(value)


def _read_yaml(path: Path) -> dict:
    source = str(path)
    data = load_yaml(path, "policy")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _fail(source, "<top level>", "must be a mapping with sections 'shadow' and/or 'promote'")
    return data


def _declared_scope(source: str, data: dict) -> str | None:
    """The `scope` the file declares, validated and taken out of `data`; None when it declares none."""
    if "scope" not in data:
        return None
    scope = data.pop("scope")
    if scope not in SCOPES:
        raise _fail(source, "scope", f"must be one of {', '.join(SCOPES)}, got {short_repr(scope)}")
    return scope


def _validated_values(path: Path) -> tuple[str | None, dict[str, dict]]:
    """The scope the file declares (None if none) and every field it sets, validated, as {section: {field: value}}."""
    source = str(path)
    data = _read_yaml(path)
    version = data.pop("version", POLICY_VERSION)
    if version != POLICY_VERSION:
        raise _fail(source, "version", f"must be {POLICY_VERSION}, got {short_repr(version)}")
    scope = _declared_scope(source, data)
    values: dict[str, dict] = {}
    if "prometheus" in data:  # gates that only add checks: kept whole, never merged with the default's
        values["prometheus"] = parse_section(source, data.pop("prometheus"))
    for section, body in data.items():
        if section not in _SECTIONS:
            raise _fail(source, str(section), f"is not a known section (known: {', '.join(_SECTIONS)}; "
                        "other top-level fields: version, scope, prometheus)")
        if not isinstance(body, dict):
            raise _fail(source, section, "must be a mapping of field: value")
        known = {f.name for f in fields(_SECTIONS[section])}
        values[section] = {}
        for name, value in body.items():
            dotted = f"{section}.{name}"
            if name not in known:
                raise _fail(source, dotted, f"is not a known field of '{section}' (known: {', '.join(sorted(known))})")
            values[section][name] = _check_value(source, dotted, name, value)
    return scope, values


def packaged_policies() -> list[str]:
    """The names of the policies shipped in the package (checks/policies/<name>.yml)."""
    return sorted(p.stem for p in DEFAULT_POLICY_PATH.parent.glob("*.yml"))


def resolve_policy_path(given: str | Path) -> Path:
    """The policy file `given` names: an existing file as given, else the packaged policy of that name (`sandbox`,
    `sandbox.yml` or `checks/policies/sandbox.yml` from an installed package with no repository around)."""
    path = Path(given).expanduser()
    if path.exists():
        return path
    packaged = DEFAULT_POLICY_PATH.parent / (path.name if path.suffix == ".yml" else f"{path.name}.yml")
    if path.parent.name in ("policies", "") and packaged.exists():
        return packaged
    raise ConfigError(f"policy {given}: file not found", hint="pass an existing file to --policy, or a packaged "
                      f"policy: {', '.join(packaged_policies())}")


def load_policy(path: str | Path | None = None) -> Policy:
    """Load the default policy, overlaid with the scope and fields `path` sets (if given: a file or a packaged
    policy's name); validate the result."""
    scope, merged = _validated_values(DEFAULT_POLICY_PATH)
    prometheus = merged.pop("prometheus", None)
    source = str(DEFAULT_POLICY_PATH)
    declared = scope
    if path is not None:
        resolved = resolve_policy_path(path)
        source = str(path) if resolved == Path(path).expanduser() else str(resolved)
        declared, values = _validated_values(resolved)
        scope = declared or scope
        prometheus = values.pop("prometheus", None)
        for section, body in values.items():
            merged.setdefault(section, {}).update(body)
    built = {}
    for section, cls in _SECTIONS.items():
        body = merged.get(section, {})
        missing = [f.name for f in fields(cls) if f.name not in body]
        if missing:
            raise _fail(str(DEFAULT_POLICY_PATH), f"{section}.{missing[0]}", "is missing from the default policy")
        built[section] = cls(**body)
    shadow = built["shadow"]
    if shadow.rel_l2_p99 > shadow.rel_l2_max:
        raise _fail(
            source,
            "shadow.rel_l2_p99",
            f"({shadow.rel_l2_p99}) must not exceed shadow.rel_l2_max ({shadow.rel_l2_max})",
        )
    return Policy(source=source, shadow=shadow, promote=built["promote"], scope=scope or SCOPE_ANY,
                  scope_declared=declared is not None, prometheus=prometheus)


def refuse_out_of_scope(policy: Policy, serving_kinds: dict[str, str], *, from_environment: bool = False) -> None:
    """Raise ConfigError when `policy` may not gate a target that is not a sandbox host: a sandbox-only policy,
    or one that loosens the default's thresholds without declaring its scope. `serving_kinds`: each target
    host's name -> its inventory serving_kind; `from_environment`: CUTOVER_POLICY named the policy, not
    --policy."""
    outside = [f"{name} (serving_kind {kind})" for name, kind in serving_kinds.items() if kind != SANDBOX_SERVING_KIND]
    if not outside:
        return
    named_by = " (from CUTOVER_POLICY)" if from_environment else ""
    if policy.scope == SCOPE_SANDBOX:
        production = "pass --policy with a production policy, or no --policy for checks/policies/default.yml"
        hint = (
            f"unset CUTOVER_POLICY (it names this sandbox-only policy), then {production}"
            if from_environment
            else f"{production}; without --policy, CUTOVER_POLICY applies: unset it if it names a sandbox policy"
        )
        raise ConfigError(
            f"policy {policy.source}{named_by} has scope {policy.scope}: it may gate only sandbox hosts, "
            f"not {', '.join(outside)}",
            hint=hint,
        )
    loosened = [] if policy.scope_declared else loosened_fields(policy)
    if loosened:
        raise ConfigError(
            f"policy {policy.source}{named_by} declares no scope and is looser than checks/policies/default.yml "
            f"({'; '.join(loosened)}): it may not gate {', '.join(outside)}",
            hint="a rehearsal policy says `scope: sandbox` (it then gates sandbox hosts only); to gate these hosts "
            "with looser thresholds on purpose, say `scope: any` in the policy file",
        )


# Which way each shadow threshold tightens, for `looser_than` and `loosened_fields`: AT_MOST limits (a larger value lets more through)
# and AT_LEAST minimums (a smaller value lets more through). Every ShadowPolicy field must be listed here: a new
# field without a direction makes `looser_than` refuse to run (and tests/workflow/test_policy_binding.py fail),
# so whoever adds a threshold decides how promote compares it.
AT_MOST = "at most"
AT_LEAST = "at least"
SHADOW_DIRECTIONS = {
    "min_duration_s": AT_LEAST,
    "min_compared_calls": AT_LEAST,
    "rel_l2_p99": AT_MOST,
    "rel_l2_max": AT_MOST,
    "max_abs": AT_MOST,
    "max_nonfinite": AT_MOST,
    "truth_anchor_k": AT_MOST,  # err_custom <= k * err_triton + floor: a larger k admits more
    "truth_anchor_floor": AT_MOST,
    "truth_anchor_min_samples": AT_LEAST,
    "max_silence_s": AT_MOST,
    "max_unclean_restarts": AT_MOST,
}


# The same for the promote watch: a shorter watch, sparser probes or more tolerated failures let more through.
PROMOTE_DIRECTIONS = {
    "watch_minutes": AT_LEAST,
    "probe_interval_s": AT_MOST,
    "max_failed_probes": AT_MOST,
    "min_verify_rate_ratio": AT_LEAST,
    "max_new_errors": AT_MOST,
    "min_accept_length_ratio": AT_LEAST,
}


def _require_directions(section: str) -> dict[str, str]:
    """The section's directions; RuntimeError for a field that has none (never guess which way it tightens)."""
    directions = SHADOW_DIRECTIONS if section == "shadow" else PROMOTE_DIRECTIONS
    unknown = [f.name for f in fields(_SECTIONS[section]) if directions.get(f.name) not in (AT_MOST, AT_LEAST)]
    if unknown:
        raise RuntimeError(
            f"checks/policy.py: no direction for {section} field(s) {', '.join(unknown)} in "
            f"{section.upper()}_DIRECTIONS: say whether a larger value is looser (AT_MOST) or stricter (AT_LEAST)"
        )
    return directions


def _lets_more_through(value: float | int, than: float | int, direction: str) -> bool:
    return value > than if direction == AT_MOST else value < than


def loosened_fields(policy: Policy) -> list[str]:
    """One line per threshold (shadow and promote) where `policy` lets through more than the shipped default."""
    default = load_policy()
    lines = []
    for section in _SECTIONS:
        directions = _require_directions(section)
        mine, shipped = getattr(policy, section), getattr(default, section)
        for f in fields(mine):
            value, limit = getattr(mine, f.name), getattr(shipped, f.name)
            if _lets_more_through(value, limit, directions[f.name]):
                lines.append(f"{section}.{f.name} {_shown(value)}, the default {directions[f.name]} {_shown(limit)}")
    return lines


def shadow_thresholds(shadow: ShadowPolicy) -> dict:
    """The shadow section as a plain dict (every field), as a verdict records it (`VerdictRecord.policy_shadow`)."""
    return asdict(shadow)


def _shown(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def looser_than(recorded: dict | None, policy: ShadowPolicy) -> list[str]:
    """One line per shadow threshold where `recorded` (the thresholds a verdict was judged under, as
    `shadow_thresholds` wrote them) lets through more than `policy` does; empty when the verdict was judged
    at least as strictly on every field.

    Fails closed: a verdict without recorded thresholds (written by an older cutover) gives one line saying
    so; a field the record lacks, or holds no number for, gives a line for that field. Fields the record has
    but `policy` does not know are ignored. Raises RuntimeError for a ShadowPolicy field with no direction
    in SHADOW_DIRECTIONS, never guessing which way it tightens."""
    directions = _require_directions("shadow")
    if recorded is None:
        return ["shadow: the verdict records no thresholds (written by an older cutover), so it cannot be shown "
                "to meet this policy"]
    if not isinstance(recorded, dict):
        return [f"shadow: the verdict's recorded thresholds are unreadable ({type(recorded).__name__}, "
                "not a mapping)"]
    lines = []
    for f in fields(ShadowPolicy):
        direction = directions[f.name]
        current = getattr(policy, f.name)
        need = f"this policy needs {direction} {_shown(current)}"
        if f.name not in recorded:
            lines.append(f"shadow.{f.name}: the verdict was judged without this threshold, {need}")
            continue
        value = recorded[f.name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            lines.append(f"shadow.{f.name}: the verdict records {value!r}, not a number, {need}")
            continue
        if _lets_more_through(value, current, direction):
            lines.append(f"shadow.{f.name}: the verdict was judged with {_shown(value)}, {need}")
    return lines
