"""Gate policies and the checks that evaluate them.

`checks.policy` loads and validates a YAML gate policy (`checks/policies/default.yml` ships with cutover);
`checks.gates` turns divergence stats, heartbeats and restart evidence into a verdict with reasons.
"""

from checks.gates import GateResult, RankObservation, StatsSummary, Verdict, evaluate_shadow
from checks.policy import DEFAULT_POLICY_PATH, Policy, PromotePolicy, ShadowPolicy, load_policy

__all__ = [
    "DEFAULT_POLICY_PATH",
    "GateResult",
    "Policy",
    "PromotePolicy",
    "RankObservation",
    "ShadowPolicy",
    "StatsSummary",
    "Verdict",
    "evaluate_shadow",
    "load_policy",
]
