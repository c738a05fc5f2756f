"""Raft replication of the controller's state with PySyncObj, ticked from the reactor.

PySyncObj usually runs its own thread; here ``autoTick`` is off and a LoopingCall ticks it, so the state
machine, the commit callbacks and the remoting server all run on the reactor thread and share no locks.
A committed event is applied to :class:`~gateway.controller.replicas.ReplicasInfoManager` on every
controller; the journal and snapshots live under ``controllerStorePath``.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_inet_ntop = socket.inet_ntop
from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated  # noqa: E402
from pysyncobj.syncobj import FAIL_REASON  # noqa: E402

# PySyncObj 0.3.14 (pysyncobj/win_inet_pton.py) replaces socket.inet_ntop with a Windows-only version on every
# platform as it is imported; put the real one back.
socket.inet_ntop = _inet_ntop

from twisted.internet import defer, task  # noqa: E402
from twisted.logger import Logger  # noqa: E402

from .replicas import ReplicasInfoManager  # noqa: E402

log = Logger()


class NotLeader(Exception):
    """This controller is not the Raft leader (CONTROLLER_NOT_LEADER)."""


class ReplicatedState(SyncObjConsumer):
    """The state machine as PySyncObj replicates it: one replicated method applies one event."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas = ReplicasInfoManager()  # serialized in snapshots (set after the consumer's init)

    @replicated
    def apply_events(self, events: list[dict[str, Any]]) -> int:
        for event in events:
            self.replicas.apply(event)
        return len(events)


class RaftNode:
    """One controller's Raft member: ``self_addr`` and ``peers`` are ``host:port`` Raft addresses."""

    TICK = 0.01

    def __init__(
        self,
        self_addr: str,
        peers: list[str],
        store_path: str,
        reactor: Any,
        commit_timeout: float = 5.0,
        raft_timeouts: tuple[float, float] = (0.4, 1.4),
    ) -> None:
        os.makedirs(store_path, exist_ok=True)
        name = self_addr.replace(":", "_")
        conf = SyncObjConf(
            autoTick=False,
            journalFile=os.path.join(store_path, f"raft-{name}.journal"),
            fullDumpFile=os.path.join(store_path, f"raft-{name}.dump"),
            useFork=False,  # a forked Twisted process is no place for a snapshot
            raftMinTimeout=raft_timeouts[0],
            raftMaxTimeout=raft_timeouts[1],
            appendEntriesPeriod=min(0.1, raft_timeouts[0] / 4),
            connectionTimeout=max(3.5, raft_timeouts[1] * 2),
            connectionRetryTime=1.0,
            # A leader cut off from the others steps down soon, so no two controllers act as leader for long.
            leaderFallbackTimeout=max(3.0, raft_timeouts[1] * 2),
        )
        self.state = ReplicatedState()
        self.sync = SyncObj(self_addr, [p for p in peers if p != self_addr], conf, consumers=[self.state])
        self.self_addr = self_addr
        self.reactor = reactor
        self.commit_timeout = commit_timeout
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = reactor

    @property
    def replicas(self) -> ReplicasInfoManager:
        return self.state.replicas

    def start(self) -> None:
        self._loop.start(self.TICK, now=True).addErrback(lambda f: log.failure("raft tick stopped", f))

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()
        self.sync.destroy()

    def _tick(self) -> None:
        self.sync.doTick(0.0)

    @property
    def is_leader(self) -> bool:
        return bool(self.sync._isLeader())

    @property
    def leader(self) -> str | None:
        leader = self.sync._getLeader()
        return None if leader is None else str(getattr(leader, "address", leader))

    def commit(self, events: list[dict[str, Any]]) -> defer.Deferred[None]:
        """Replicate ``events`` and apply them; fires once committed (NotLeader / TimeoutError otherwise)."""
        if not events:
            return defer.succeed(None)
        if not self.is_leader:
            return defer.fail(NotLeader(self.leader))
        d: defer.Deferred[None] = defer.Deferred()

        def committed(_result: Any, error: Any) -> None:
            if d.called:
                return
            if error == FAIL_REASON.SUCCESS:
                d.callback(None)
            elif error == FAIL_REASON.NOT_LEADER:
                d.errback(NotLeader(self.leader))
            else:
                d.errback(RuntimeError(f"raft commit failed: {error}"))

        self.state.apply_events(events, callback=committed)
        return d.addTimeout(self.commit_timeout, self.reactor)
