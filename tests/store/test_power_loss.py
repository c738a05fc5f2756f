"""What a power cut costs in each flush mode: sends are acknowledged as the broker does (ASYNC_FLUSH at once,
SYNC_FLUSH after group commit), then everything not yet fsynced is dropped and the store recovers.

SYNC_FLUSH must lose no acknowledged message; ASYNC_FLUSH loses only messages acknowledged within about one
flush interval before the cut.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater

from gateway.remoting.message import decode_records
from gateway.store import DefaultMessageStore, StoreConfig
from gateway.store.config import ASYNC_FLUSH, SYNC_FLUSH
from gateway.store.flush import FlushService

from .conftest import crash, lose_commit_log_from, make_msg

FLUSH_INTERVAL_MS = 100


def read_bodies(store: DefaultMessageStore) -> set[bytes]:
    found: set[bytes] = set()
    for qid in range(4):
        offset = 0
        while (r := store.get_message("g", "Power", qid, offset, 32)) is not None and r.buffers:
            found.update(m.body for m in decode_records(b"".join(r.buffers)))
            offset = r.next_begin_offset
    return found


@defer.inlineCallbacks
def send_then_cut_power(config: StoreConfig, seconds: float) -> Any:
    """Send for ``seconds``, 16 sends in flight, then cut the power: returns ([(body, ack time)], cut time)."""
    store = DefaultMessageStore(config)
    store.start()
    flush = FlushService(store, config, reactor)
    flush.start()
    acked: list[tuple[bytes, float]] = []
    seq = 0

    def put() -> defer.Deferred[bool]:
        nonlocal seq
        body = b"%08d" % seq + b"." * 1016
        seq += 1
        r = store.put_message(make_msg("Power", seq % 4, body=body))
        assert r.append is not None
        end = r.append.wrote_offset + r.append.wrote_bytes
        d = flush.wait_for_flush(end) if config.flushDiskType == SYNC_FLUSH else defer.succeed(True)
        return d.addCallback(lambda ok: ok and acked.append((body, time.monotonic())))

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        yield defer.gatherResults([put() for _ in range(16)])
        if config.flushDiskType == ASYNC_FLUSH:
            yield deferLater(reactor, 0, lambda: None)  # let the flush service's timer run
    durable, cut_at, acked_before = store.flushed_where, time.monotonic(), list(acked)
    yield flush.stop()
    crash(store)
    lose_commit_log_from(config, durable)
    return acked_before, cut_at


@pytest.mark.parametrize("mode", [SYNC_FLUSH, ASYNC_FLUSH])
@pytest_twisted.inlineCallbacks
def test_power_cut_loses_only_what_the_mode_allows(config: StoreConfig, mode: str) -> Any:
    config = dataclasses.replace(
        config, mappedFileSizeCommitLog=1 << 20, flushDiskType=mode, flushIntervalCommitLog=FLUSH_INTERVAL_MS
    )
    acked, cut_at = yield send_then_cut_power(config, 3.0)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        found = read_bodies(store)
        lost = [(body, t) for body, t in acked if body not in found]
        print(f"{mode} power cut: {len(acked)} acknowledged, {len(lost)} lost ({report.bytes_truncated} bytes cut)")
        assert len(acked) > 200
        if mode == SYNC_FLUSH:
            assert lost == []
        else:
            # Only what was acknowledged since the last flush can go: about one flush interval's worth (two, plus
            # slack for a busy machine: with six test workers an fdatasync took over half a second). The sends
            # last longer than that window, so a store that never flushed would fail here.
            window = 2 * FLUSH_INTERVAL_MS / 1000 + 1.0
            assert cut_at - acked[0][1] > window
            assert all(cut_at - t < window for _, t in lost)
    finally:
        store.shutdown()
