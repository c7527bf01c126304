"""SGLang's speculative-decoding series on the sandbox's /metrics, from its synthetic verify traffic.

SGLang exports `sglang:generation_tokens_total` (a counter of generated tokens) and `sglang:spec_accept_length`
(a gauge: the mean tokens each request accepts per verify step, over the scheduler's last log interval) once
per server. The sandbox has no model and no draft to accept: each request of a verify step accepts 1 to
log2(tree size) + 1 tokens, drawn at random, so the token rate moves with the traffic (batch sizes, tree sizes,
steps per second) the way a server's does. The accept length is the running mean since the rank started, logged
every ACCEPT_LOG_STEPS steps: the sandbox's kernel never changes what a draft accepts, so the figure holds still
across a flip instead of drifting with the random tree mix (which would trip the promote watch's accept-length
floor). Rank 0 records them, as only SGLang's first scheduler logs its stats.
"""

from __future__ import annotations

import random

ACCEPT_LOG_STEPS = 40  # verify steps per accept-length update, as SGLang's default decode log interval


class SpeculativeStats:
    """The two series of one server, written by one rank (prometheus_client's multiprocess directory when the
    rank has one)."""

    def __init__(self, seed: int):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self.tokens = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                              registry=self.registry)
        self.accept_length = Gauge("sglang:spec_accept_length",
                                   "The average acceptance length of speculative decoding.",
                                   multiprocess_mode="mostrecent", registry=self.registry)
        self.rng = random.Random(seed)
        self.accepted = 0  # tokens accepted since the rank started
        self.verified = 0  # requests verified since then
        self.steps = 0

    def record(self, tree_size: int, requests: int) -> None:
        """One verify step of `requests` requests, each verifying a draft tree of `tree_size` tokens."""
        if tree_size < 1 or requests < 1:
            raise ValueError(f"a verify step needs a tree of at least 1 token and a request, not tree size "
                             f"{tree_size} and {requests} request(s)")
        depth = max(1, tree_size.bit_length() - 1)
        accepted = sum(1 + self.rng.randint(0, depth) for _ in range(requests))
        self.tokens.inc(accepted)
        self.accepted += accepted
        self.verified += requests
        self.steps += 1
        if self.steps % ACCEPT_LOG_STEPS == 0:
            self.accept_length.set(self.accepted / self.verified)
