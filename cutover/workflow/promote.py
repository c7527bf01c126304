"""`cutover promote`: flip hosts to the custom kernel one at a time, canary first, each under a guarded watch.

A host may be promoted only when the release staged and loaded on every rank passed shadow there (its phase is
shadow_passed and that run's verdict passed for the same release under a policy no looser than promote's, on the
serving stack the ranks report now: SGLang, torch, plugin code, GPU);
`--force` overrides a missing or failed verdict and journals it, never a host not serving the staged release.
All hosts are checked before anything changes. Each host then runs custom under a lease while it is probed
against the baseline its shadow run recorded (what that baseline cannot support is said and journaled); a
regression, or any failure after the flip, rolls that host back and stops the rollout. After a clean window the
phase becomes promoted while the lease still guards the host, and only then the host runs custom leaseless.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, NoReturn

import requests

from checks.policy import Policy, looser_than
from checks.prometheus import GateWatch, first_failure
from cutover import notify
from cutover.config import Host, Inventory, Settings
from cutover.errors import CutoverError, GateFailedError, PhaseError
from cutover.hoststate import release_of
from cutover.rollback import rollback_hosts
from cutover.servingstack import distinct_stacks, stack_changes, unusable
from cutover.workflow.observe import (HostLink, RankTracker, locked_links, trackers_from_ack,
                                     with_heartbeat_counters)
from cutover.workflow.probes import ServerSample, counter_rate, mean_of, probe, tokens_per_s
from cutover.workflow.runstore import RunStore
from cutover.workflow.shadow import DEFAULT_LEASE_TTL_S, sigint_deferred


@dataclass
class PromoteOptions:
    policy: Policy
    watch_minutes: float | None = None  # None: the policy's promote.watch_minutes
    force: bool = False
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    reports_dir: str | None = None  # where the shadow runs are kept: each watch is recorded beside its run

    @property
    def watch_s(self) -> float:
        return 60.0 * (self.watch_minutes if self.watch_minutes is not None else self.policy.promote.watch_minutes)


@dataclass
class HostPlan:
    """What promote will do on one host, decided before anything changes."""

    host: Host
    release_id: str | None
    action: str  # "promote", "already promoted"
    baseline: dict = field(default_factory=dict)
    run_id: str | None = None
    override: str = ""  # the refusal --force overrode
    generation: int | None = None  # control.json's generation when checked: the flip builds on it, or refuses
    stacks: list[dict] | None = None  # the serving stacks the ranks run now: custom is approved on these only


@dataclass
class Refusal:
    """Why a host may not be promoted, and what to do. `forceable`: --force may override it (a missing or failed
    shadow verdict: journaled); never where the host does not serve the staged release with every rank."""

    reason: str
    fix: str
    forceable: bool = True

    def line(self) -> str:
        return f"{self.reason} (fix: {self.fix})"


SHADOW_FIX = "run `cutover shadow` for the staged release until it passes (or --force, journaled)"


@dataclass
class HostPromotion:
    host: str
    outcome: str  # "promoted", "already promoted", "rolled back"
    detail: str


@dataclass
class WatchTick:
    """One probe of a host's post-promote watch, against what would roll it back: for a live view."""

    host: str
    elapsed_s: float
    watch_s: float
    lease_left_s: float
    healthy: bool
    failed_probes: int
    max_failed_probes: int
    error: str
    verify_rate: float | None  # verify steps/s over the recent window; None until three probes give one
    base_verify_rate: float | None  # the shadow baseline's
    min_verify_rate_ratio: float
    new_errors: float | None
    new_nonfinite: float | None
    max_new_errors: float
    accept_length: float | None
    base_accept_length: float | None
    tokens_per_s: float | None  # generated tokens/s over the recent window; None where the server exposes none
    base_tokens_per_s: float | None

    def line(self) -> str:
        """The tick on one line: countdown, health, verify rate against its floor, error counts, accept length and
        tokens/s where known, lease."""
        left = math.ceil(max(0.0, self.watch_s - self.elapsed_s))
        health = "ok" if self.healthy else f"FAILED ({self.error})"
        rate = "-" if self.verify_rate is None else f"{self.verify_rate:.2f}/s"
        if self.base_verify_rate:
            rate += (f" vs shadow {self.base_verify_rate:.2f}/s (rollback below "
                     f"{self.min_verify_rate_ratio * self.base_verify_rate:.2f})")
        else:
            rate += " (no shadow baseline: not checked)"
        served = (_beside_shadow("accept length", self.accept_length, self.base_accept_length)
                  + _beside_shadow("tokens/s", self.tokens_per_s, self.base_tokens_per_s))
        return (f"{self.host}: watch {_clock(self.elapsed_s)} of {_clock(self.watch_s)}, {_clock(left)} left | "
                f"health {health}, failed in a row {self.failed_probes}/{self.max_failed_probes} | verify rate {rate}"
                f" | new errors {_count(self.new_errors)}, new non-finite {_count(self.new_nonfinite)} (allowed "
                f"{self.max_new_errors:g}){served} | lease {self.lease_left_s:.0f} s left")


def _beside_shadow(label: str, value: float | None, base: float | None) -> str:
    """" | <label> <value> vs shadow <base>" for a figure the server exposes ("" when neither is known)."""
    if value is None and not base:
        return ""
    return f" | {label} {_rate(value)}" + (f" vs shadow {base:.2f}" if base else "")


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60:d}:{seconds % 60:02d}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def plan_promotion(links: list[HostLink], force: bool, policy: Policy) -> list[HostPlan]:
    """Check every host against `policy`; raise PhaseError naming each refused host, with its fix (--force
    overrides only the forceable refusals)."""
    plans, refusals = [], []
    for link in links:
        plan, refusal = _plan_host(link, policy)
        if refusal and (not force or not refusal.forceable):
            refusals.append(refusal)
        plan.override = refusal.reason if refusal else ""
        plans.append(plan)
    if refusals:
        hard = force and any(not r.forceable for r in refusals)
        raise PhaseError(
            "promote refused, nothing was changed:\n  " + "\n  ".join(r.line() for r in refusals),
            hint=("--force overrides a missing or failed shadow verdict, never a host whose ranks do not all serve "
                  "the staged release" if hard else "`cutover status` shows every host and rank"),
        )
    return plans


def _plan_host(link: HostLink, policy: Policy) -> tuple[HostPlan, Refusal | None]:
    phase = link.call(lambda st: st.read_phase())
    views = link.call(lambda st: st.ranks())
    loaded = release_of(views)
    control = link.call(lambda st: st.read_control())
    plan = HostPlan(link.host, phase.release_id, "promote", run_id=phase.run_id,
                    generation=control.generation if control else None, stacks=approvable_stacks(views))
    if phase.phase == "promoted":
        if control and control.mode == "custom" and control.lease_expires_at is None and loaded == phase.release_id:
            off_custom = [v for v in views if v.heartbeat.mode_active != "custom"]  # all fresh: loaded is set
            if off_custom:  # e.g. a rank restarted after a crash: it refuses the generation it had armed
                first = off_custom[0]
                return plan, Refusal(
                    f"host {link.name}: promoted, but rank {first.rank} runs {first.heartbeat.mode_active} "
                    f"({first.heartbeat.reason or 'no reason given'})",
                    "run `cutover rollback` on it, find the cause, then shadow and promote again (`cutover promote "
                    "--force` after the rollback skips the shadow, journaled)", forceable=False)
            plan.action = "already promoted"
            return plan, None
    if loaded is None:
        return plan, Refusal(
            f"host {link.name}: not every rank is heartbeating: the serving process is down or the plugin is not "
            "loaded", "start serving (`cutover stage --yes` restarts it); `cutover status` shows each rank's "
            "reason", forceable=False)
    if loaded != phase.release_id:
        return plan, Refusal(f"host {link.name}: release {phase.release_id} is staged but the ranks run {loaded}",
                             "restart serving so it loads the staged release (`cutover stage --yes`)",
                             forceable=False)
    if phase.phase == "promoted":  # not leaseless custom: a promote stopped after its watch, before the last flip
        return plan, Refusal(f"host {link.name}: phase is promoted but control.json asks for "
                             f"{control.mode if control else 'nothing'}"
                             + (" under a lease" if control and control.lease_expires_at else ""),
                             "run `cutover rollback` on it, then shadow and promote again (or `cutover promote "
                             "--force`, journaled, to watch and promote it again)")
    if phase.phase != "shadow_passed" or not phase.run_id:
        return plan, Refusal(f"host {link.name}: phase is {phase.phase}, the staged release {phase.release_id} has "
                             "not passed shadow", SHADOW_FIX)
    verdict = link.call(lambda st: st.read_verdict(phase.run_id))
    if verdict is None:
        return plan, Refusal(f"host {link.name}: the verdict of shadow run {phase.run_id} is missing or unreadable",
                             SHADOW_FIX)
    if not verdict.get("passed") or verdict.get("release_id") != loaded:
        return plan, Refusal(f"host {link.name}: shadow run {phase.run_id} did not pass release {loaded} "
                             f"(verdict: {verdict.get('verdict')}, release {verdict.get('release_id')})", SHADOW_FIX)
    doubts, fixes = [], []  # both are named (and journaled if forced), so neither hides the other
    looser = looser_than(verdict.get("policy_shadow"), policy.shadow)
    if looser:
        doubts.append(f"was judged under a looser policy ({verdict.get('policy_source') or 'not recorded'}) than "
                      f"this one ({policy.source}): " + "; ".join(looser))
        fixes.append(f"shadow again under {policy.source}, or promote with the policy the run was judged under "
                     "(--policy) if it is the one meant")
    changes = stack_changes(_recorded_stacks(verdict, link.name), distinct_stacks(v.heartbeat.stack for v in views))
    if changes:
        doubts.append(f"does not cover what the host serves with now: {'; '.join(changes)}")
        fixes.append("shadow the staged release again on this serving stack")
    if doubts:
        return plan, Refusal(f"host {link.name}: shadow run {phase.run_id} " + "; and it ".join(doubts),
                             "; or ".join(fixes) + " (or --force, journaled)")
    plan.baseline = (verdict.get("baseline") or {}).get(link.name, {})
    return plan, None


def approvable_stacks(views) -> list[dict] | None:
    """The distinct serving stacks of the live ranks, which control.json then names as the only ones custom may run
    on; None (no such limit) when a rank reports none usable (a forced promote of an older plugin)."""
    stacks = distinct_stacks(view.heartbeat.stack for view in views if view.fresh)
    return None if not stacks or any(unusable(stack) for stack in stacks) else stacks


def _recorded_stacks(verdict: dict, host: str) -> list[dict] | None:
    """The serving stacks `verdict` recorded for `host` (None: it recorded none, as an older cutover's)."""
    stacks = verdict.get("stacks")
    return stacks.get(host) if isinstance(stacks, dict) else None


def recheck_before_flip(link: HostLink, checked: HostPlan, policy: Policy) -> HostPlan:
    """The host checked again right before its flip: a rollout runs a watch per host, so minutes pass between
    the first check and a later host's turn. What changed since (a rollback by on-call, another release loaded,
    control.json moved on) stops the rollout there, with nothing changed on this host; --force overrides only
    what it overrode at the start."""
    plan, refusal = _plan_host(link, policy)
    plan.override = checked.override
    changed = refusal.reason if refusal and refusal.reason != checked.override else None
    if not changed and plan.generation != checked.generation:
        changed = (f"host {link.name}: control.json moved from generation {checked.generation} to "
                   f"{plan.generation} since promote checked it: someone acted on the host")
    if changed:
        raise PhaseError(f"promote stopped before {link.name}, nothing changed there: {changed}",
                         hint="read `cutover status` and the journal; the hosts promoted so far stay promoted")
    return plan


RECENT_WINDOW_S = 120.0  # rates and accept lengths are judged over this much of the latest probes
RATED_PROBES = 3  # the fewest probes a rate of the watch (or of the host right before its flip) is taken over


class _Regression(Exception):
    pass


def run_promote(
    inventory: Inventory,
    hosts: list[Host],
    settings: Settings,
    options: PromoteOptions,
    on_event: Callable[[str], None] | None = None,
    on_watch: Callable[[WatchTick], None] | None = None,
) -> list[HostPromotion]:
    """Promote `hosts` in order (canary first); raise GateFailedError at the first regression. `on_event` gets
    each step as a line, `on_watch` each probe of a watch."""
    say = on_event or (lambda message: None)
    tick = on_watch or (lambda watch_tick: None)
    lock_ttl = max(60.0, 4 * options.lease_ttl_s)  # renewed with the lease: a killed CLI frees hosts soon
    with locked_links(hosts, settings, "promote", lock_ttl) as (links, locks):

        def renew(link: HostLink) -> None:
            link.call(lambda st: st.renew_lock(locks[link.name], lock_ttl))

        def keep_locks(watched: HostLink) -> None:
            """The watched host's lock must hold (else the watch stops); another host's is renewed as it can be:
            its own turn renews it first and stops the rollout there if it was lost."""
            renew(watched)
            for link in links:
                if link is not watched:
                    try:
                        renew(link)
                    except CutoverError as err:
                        say(f"{link.name}: its lock could not be renewed now ({err.message}); tried again later")

        plans = plan_promotion(links, options.force, options.policy)
        results = []
        for link, checked in zip(links, plans):
            try:
                renew(link)
            except CutoverError as err:
                raise PhaseError(f"promote stopped before {link.name}, nothing changed there: its lock could not "
                                 f"be renewed: {err.message}",
                                 hint="read `cutover status`; the hosts promoted so far stay promoted") from err
            plan = recheck_before_flip(link, checked, options.policy)
            if plan.action == "already promoted":
                say(f"{link.name}: already promoted with release {plan.release_id}: nothing to do")
                results.append(HostPromotion(link.name, "already promoted", f"release {plan.release_id}"))
                continue
            results.append(_promote_host(inventory, link, plan, settings, options, say, tick,
                                         lambda watched=link: keep_locks(watched)))
        return results


def _promote_host(
    inventory: Inventory,
    link: HostLink,
    plan: HostPlan,
    settings: Settings,
    options: PromoteOptions,
    say: Callable[[str], None],
    tick: Callable[[WatchTick], None],
    keep_locks: Callable[[], None],
) -> HostPromotion:
    """Custom under a lease, watched; then recorded as promoted while the lease still guards the host, and
    only then leaseless. Any failure after the first switch rolls the host back (see `_stop`)."""
    if plan.override:
        link.call(lambda st: st.journal("promote_forced", release_id=plan.release_id, overridden=plan.override))
        say(f"{link.name}: --force overrides: {plan.override}")
    unchecked = unchecked_watch_checks(plan.baseline)
    if unchecked:
        say(f"{link.name}: {unchecked}")
    gates = GateWatch(options.policy.prometheus, "promote")
    gates.record_before()  # a relative gate's value before the flip; nothing is switched if it cannot be read
    record = _run_recorder(options.reports_dir, plan.run_id)
    triton = triton_figures(link, options.policy)
    say(f"{link.name}: verify steps/s on Triton before the flip: {_rate(triton['verify_rate'])} (shadow baseline "
        f"{_rate(plan.baseline.get('verify_rate'))})"
        + _beside_shadow("accept length", triton["accept_length"], plan.baseline.get("accept_length"))
        + _beside_shadow("tokens/s", triton["tokens_per_s"], plan.baseline.get("tokens_per_s")))
    record({"at": time.time(), "host": link.name, **{f"triton_{key}": value for key, value in triton.items()}})

    def tick_and_record(watch_tick: WatchTick) -> None:
        tick(watch_tick)
        record({"at": time.time(), **asdict(watch_tick)})

    leased = True
    try:
        control = link.call(
            lambda st: st.set_mode(
                "custom", reason="promote: guarded watch", release_id=plan.release_id, lease_s=options.lease_ttl_s,
                expect_generation=plan.generation, stacks=plan.stacks,
            )
        )
        link.call(
            lambda st: st.journal(
                "promote_start",
                release_id=plan.release_id,
                generation=control.generation,
                watch_s=options.watch_s,
                shadow_run=plan.run_id,
                unchecked=unchecked,
            )
        )
        ack = link.call(lambda st: st.wait_for_ack(control.generation))
        say(
            f"{link.name}: custom kernel live under a {options.lease_ttl_s:.0f} s lease; watching "
            f"{options.watch_s / 60:g} min"
        )
        _watch(link, plan, control.generation, ack, options, keep_locks, gates, tick_and_record)
        forced = bool(plan.override)
        link.call(
            lambda st: st.set_phase(
                "promoted",
                release_id=plan.release_id,
                run_id=plan.run_id,
                force=forced,
                reason=f"forced: {plan.override}" if forced else "watch passed",
            )
        )
        leased = False
        final = link.call(
            lambda st: st.set_mode("custom", reason="promoted after a clean watch", release_id=plan.release_id,
                                   expect_generation=control.generation, stacks=plan.stacks)
        )
        link.call(lambda st: st.wait_for_ack(final.generation))
        link.call(
            lambda st: st.journal(
                "promoted", release_id=plan.release_id, generation=final.generation, forced=forced, unchecked=unchecked
            )
        )
    except BaseException as exc:
        try:
            _stop(inventory, link, plan, settings, options, exc, leased)
        except BaseException as stopped:  # _stop always raises: its message says how the host was left
            record({"at": time.time(), "host": link.name, "outcome": "stopped",
                    "reason": (str(stopped) or type(stopped).__name__).splitlines()[0]})
            raise
    record({"at": time.time(), "host": link.name, "outcome": "promoted", "reason": "watch passed"})
    say(f"{link.name}: promoted (custom, leaseless) with release {plan.release_id}")
    notify.send(settings.notify, "promote", f"{link.name} promoted (custom kernel live) with release "
                f"{plan.release_id}", operator=settings.operator, host=link.name, release_id=plan.release_id,
                forced=bool(plan.override))
    detail = f"release {plan.release_id}" + (f"; {unchecked}" if unchecked else "")
    return HostPromotion(link.name, "promoted", detail)


PRE_FLIP_PROBES = 3  # probes of the host on Triton right before its flip: what the flip is measured against


def triton_figures(link: HostLink, policy: Policy) -> dict[str, float | None]:
    """Verify steps/s, accept length and tokens/s of the host on Triton right before its flip, over
    PRE_FLIP_PROBES probes (each None when the server does not answer or expose it). The verify steps come from
    the ranks' heartbeat counters where the server exports none, as in shadow and in the watch."""
    session = requests.Session()
    trackers = trackers_from_ack(link.name, link.call(lambda st: st.ranks()))
    samples = []
    for index in range(PRE_FLIP_PROBES):
        if index:
            time.sleep(policy.promote.probe_interval_s)
        samples.append(probe_with_heartbeats(link, session, trackers, refresh=index > 0))
    healthy = [s for s in samples if s.healthy]
    return {"verify_rate": _verify_rate(healthy), "accept_length": mean_of(healthy, "accept_length"),
            "tokens_per_s": tokens_per_s(healthy, RATED_PROBES)}


def probe_with_heartbeats(link: HostLink, session: requests.Session, trackers: list[RankTracker],
                          refresh: bool = True) -> ServerSample:
    """One probe of the host's server, its missing counters filled from the ranks' heartbeats (re-read first
    unless ``refresh`` is off)."""
    if refresh:
        for tracker, view in zip(trackers, link.call(lambda st: st.ranks())):
            tracker.update(view)
    return with_heartbeat_counters(probe(link.host, session), trackers)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _run_recorder(reports_dir: str | None, run_id: str | None) -> Callable[[dict], None]:
    """Appends to the local store of shadow run `run_id` (its report then covers the watch too); does nothing
    where that run is not kept on this machine."""
    store = RunStore(reports_dir, run_id) if run_id else None
    if store is None or not store.run_file.exists():
        return lambda record: None
    return store.append_promote


def unchecked_watch_checks(base: dict) -> str:
    """What the watch cannot compare for lack of a shadow baseline, said plainly ("" when it compares all)."""
    missing = [label for key, label in (("verify_rate", "verify-step rate"), ("accept_length", "accept length"))
               if not base.get(key)]
    if not missing:
        return ""
    why = "the shadow baseline has no value for it" if base else "there is no shadow baseline (forced promote)"
    if base.get("verify_rate_note"):
        why += f"; {base['verify_rate_note']}"
    return f"NOT CHECKED during the watch: {' and '.join(missing)} ({why})"


def _stop(inventory, link, plan, settings, options, exc: BaseException, leased: bool) -> NoReturn:
    """Roll the host back after `exc` (a second Ctrl-C waits for it) and journal it; raise GateFailedError,
    which names the outcome, for a regression, a host problem or Ctrl-C; `exc` itself for an unexpected error."""
    reason = "stopped by the operator (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else (
        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    with sigint_deferred():
        [result] = rollback_hosts(inventory, [link.host], settings, reason=f"promote stopped: {reason}",
                                  automatic=True)
    if result.ok:
        outcome = "rolled back to Triton"
    elif leased:
        outcome = (f"rollback not confirmed ({'; '.join(result.messages)}): the lease returns it to Triton within "
                   f"{options.lease_ttl_s:.0f} s")
    else:
        outcome = (f"rollback not confirmed ({'; '.join(result.messages)}): it may run custom WITHOUT a lease: "
                   f"run `cutover rollback --limit {link.name}` now")
    with contextlib.suppress(CutoverError):
        link.call(
            lambda st: st.journal("promote_rolled_back", release_id=plan.release_id, reason=reason, confirmed=result.ok)
        )
    if not isinstance(exc, (_Regression, CutoverError, KeyboardInterrupt)):
        raise exc
    raise GateFailedError(
        f"host {link.name}: {reason}; {outcome}; rollout stopped",
        hint="read `cutover status` and the journal; shadow again before promoting",
    ) from None


def _watch(link, plan, generation, ack, options, keep_locks, gates: GateWatch, tick) -> None:
    """Probe the host for the watch window (renewing its lease and every lock), handing each probe to `tick` and
    checking the PromQL `gates` at every probe; raise _Regression on the first regression."""
    policy = options.policy
    trackers = trackers_from_ack(link.name, ack.ranks)
    session = requests.Session()
    first = probe_with_heartbeats(link, session, trackers, refresh=False)  # reference for the counters
    samples: list[ServerSample] = [first] if first.healthy else []
    failed_probes = 0 if first.healthy else 1
    start = renewed = time.monotonic()
    tick(watch_tick(link.name, policy, plan.baseline, samples, failed_probes, first, 0.0, options, options.lease_ttl_s))
    while time.monotonic() - start < options.watch_s:
        time.sleep(min(policy.promote.probe_interval_s, options.lease_ttl_s / 3))
        if time.monotonic() - renewed >= options.lease_ttl_s / 3:
            link.call(lambda st: st.renew_lease(generation, options.lease_ttl_s))
            keep_locks()
            renewed = time.monotonic()
        sample = probe_with_heartbeats(link, session, trackers)
        failed_probes = 0 if sample.healthy else failed_probes + 1
        if sample.healthy:
            samples.append(sample)
        now = time.monotonic()
        tick(watch_tick(link.name, policy, plan.baseline, samples, failed_probes, sample, now - start, options,
                        options.lease_ttl_s - (now - renewed)))
        problem = find_regression(policy, plan.baseline, trackers, samples, failed_probes, sample, plan.release_id)
        problem = problem or first_failure(gates.check())
        if problem:
            raise _Regression(problem)


def watch_tick(host: str, policy: Policy, base: dict, samples: list[ServerSample], failed_probes: int,
               last: ServerSample, elapsed_s: float, options: PromoteOptions, lease_left_s: float) -> WatchTick:
    """What the watch judges now, as find_regression reads it."""
    promote = policy.promote
    recent = _recent(samples, _recent_window_s(policy))
    return WatchTick(
        host=host, elapsed_s=elapsed_s, watch_s=options.watch_s, lease_left_s=lease_left_s, healthy=last.healthy,
        failed_probes=failed_probes, max_failed_probes=promote.max_failed_probes, error=last.error,
        verify_rate=_verify_rate(recent), base_verify_rate=base.get("verify_rate"),
        min_verify_rate_ratio=promote.min_verify_rate_ratio, new_errors=_rise(samples, "errors_total"),
        new_nonfinite=_rise(samples, "nonfinite_total"), max_new_errors=promote.max_new_errors,
        accept_length=mean_of(recent, "accept_length"), base_accept_length=base.get("accept_length"),
        tokens_per_s=tokens_per_s(recent, RATED_PROBES), base_tokens_per_s=base.get("tokens_per_s"),
    )


def find_regression(
    policy: Policy, base: dict, trackers, samples: list[ServerSample], failed_probes: int, last: ServerSample,
    release_id: str | None = None,
) -> str | None:
    """The first regression against the shadow baseline, or None. Rates and accept lengths are judged over the
    last RECENT_WINDOW_S of samples (at least three probes), so a stall late in the watch is not averaged away."""
    promote = policy.promote
    if failed_probes >= promote.max_failed_probes:
        return f"{failed_probes} consecutive failed health probes ({last.error})"
    for tracker in trackers:
        if release_id and tracker.release_id and tracker.release_id != release_id:
            return f"rank {tracker.rank} runs release {tracker.release_id}, not the promoted {release_id}"
        seen = tracker.observation()
        if seen.restarts:
            return f"rank {seen.rank} restarted {seen.reason}"
        if seen.heartbeat_age_s is None or seen.heartbeat_age_s > policy.shadow.max_silence_s:
            return f"rank {seen.rank} silent for more than {policy.shadow.max_silence_s:g} s"
        if seen.mode_active != "custom":
            return f"rank {seen.rank} is running {seen.mode_active}, not custom: {seen.reason}"
    for counter, label in (
        ("errors_total", "errors (cutover_errors_total)"),
        ("nonfinite_total", "non-finite outputs (cutover_nonfinite_total)"),
    ):
        rise = _rise(samples, counter)
        if rise is not None and rise > promote.max_new_errors:
            return f"{rise:.0f} new {label} since the flip (allowed {promote.max_new_errors})"
    recent = _recent(samples, _recent_window_s(policy))
    return (_below_baseline("verify steps/s", _verify_rate(recent), promote.min_verify_rate_ratio,
                            base.get("verify_rate"))
            or _below_baseline("speculative accept length", mean_of(recent, "accept_length"),
                               promote.min_accept_length_ratio, base.get("accept_length")))


def _below_baseline(what: str, value: float | None, ratio: float, baseline: float | None) -> str | None:
    """Why `value` fell below `ratio` x the shadow baseline; None without a value or a baseline."""
    if baseline and value is not None and value < ratio * baseline:
        return f"{what} fell to {value:.2f} (< {ratio} x shadow baseline {baseline:.2f})"
    return None


def _recent_window_s(policy: Policy) -> float:
    return max(RECENT_WINDOW_S, 3 * policy.promote.probe_interval_s)


def _rise(samples: list[ServerSample], counter: str) -> float | None:
    """How much `counter` rose since the first sample that has it (None below two such samples)."""
    counted = [getattr(s, counter) for s in samples if getattr(s, counter) is not None]
    return counted[-1] - counted[0] if len(counted) >= 2 else None


def _verify_rate(recent: list[ServerSample]) -> float | None:
    """Verify steps/s over `recent` (None below RATED_PROBES probes with the counter)."""
    return counter_rate(recent, "verify_steps_total", RATED_PROBES)


def _recent(samples: list[ServerSample], window_s: float) -> list[ServerSample]:
    """The samples of the last `window_s` seconds (all of them while the watch is younger than that)."""
    return [s for s in samples if s.at >= samples[-1].at - window_s] if samples else []
