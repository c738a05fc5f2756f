"""Bucket counts for RocketMQ 5's histograms (``rocketmq_rpc_latency``, ``rocketmq_message_size``), kept
cheaply on the request path: one dict lookup and one bisect a sample; exporters read them at scrape time."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Sequence

# RemotingMetricsManager's buckets (ms) and BrokerMetricsManager's message size buckets (bytes).
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
# A request code no processor serves is counted under this one key: codes come from the wire, and one
# series per code a client can make up would grow without bound.
UNKNOWN_CODE = -1


class Histograms:
    """Per-key histograms over fixed ``buckets``: key → ([count per bucket, then past the last], sum)."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.table: dict[Hashable, tuple[list[int], list[float]]] = {}

    def record(self, key: Hashable, value: float) -> None:
        entry = self.table.get(key) or self.entry(key)
        entry[0][bisect_left(self.buckets, value)] += 1
        entry[1][0] += value

    def entry(self, key: Hashable) -> tuple[list[int], list[float]]:
        """The counts and sum ``key`` records into (new and empty the first time), for a caller that keeps them."""
        entry = self.table.get(key)
        if entry is None:
            entry = self.table[key] = ([0] * (len(self.buckets) + 1), [0.0])
        return entry

    def count(self, key: Hashable) -> int:
        """Samples recorded under ``key``."""
        entry = self.table.get(key)
        return sum(entry[0]) if entry is not None else 0

    def cumulative(self, key: Hashable) -> tuple[list[tuple[str, int]], float]:
        """Prometheus' form of one histogram: (upper bound, samples at or below it) with ``+Inf``, and the sum."""
        counts, total = self.table[key]
        out = []
        running = 0
        for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out, total[0]
