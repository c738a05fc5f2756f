"""PoolLoop: blocking work in the thread pool, one run at a time; stop waits for the run in progress."""

from __future__ import annotations

import threading

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import Clock, deferLater

from gateway.pool_loop import PoolLoop


@pytest_twisted.ensureDeferred
async def test_a_tick_while_a_run_goes_on_is_skipped_and_stop_waits_for_it() -> None:
    clock = Clock()
    release, started = threading.Event(), threading.Event()
    runs: list[int] = []

    def work() -> None:
        runs.append(1)
        started.set()
        release.wait(10)

    loop = PoolLoop(clock, 1.0, work, "test work")
    loop.start(now=True)
    await deferLater(reactor, 0, lambda: None)
    assert started.wait(5)
    clock.advance(1.0)
    clock.advance(1.0)  # two ticks while the first run blocks
    assert len(runs) == 1
    stopped = loop.stop()
    assert not stopped.called
    release.set()
    await stopped
    assert len(runs) == 1


@pytest_twisted.ensureDeferred
async def test_a_failed_run_is_logged_and_the_next_tick_runs_again() -> None:
    clock = Clock()
    runs: list[int] = []

    def work() -> None:
        runs.append(1)
        raise RuntimeError("peer down")

    loop = PoolLoop(clock, 1.0, work, "test work")
    loop.start(now=True)
    for _ in range(100):
        if runs and not loop.busy:
            break
        await deferLater(reactor, 0.01, lambda: None)
    clock.advance(1.0)
    await loop.stop()
    assert len(runs) == 2
