"""Master side of 4.x replication: HAService accepts slaves on the HA port, one HAConnection each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import interfaces
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from gateway.remoting.direct import can_send_now, send_now, set_no_delay

from ..message_store import DefaultMessageStore
from ..waiters import OffsetWaiters
from .codec import TRANSFER_BATCH_SIZE, HAProtocolError, ReportDecoder, encode_transfer_header

log = Logger()


@dataclass(slots=True)
class HAConfig:
    """The broker keys both ends of the HA link read (times in milliseconds, as in Apache)."""

    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20000
    haTransferBatchSize: int = TRANSFER_BATCH_SIZE
    slaveTimeout: int = 3000
    haMaxGapNotInSync: int = 256 * 1024 * 1024


class TransferRate:
    """Bytes moved in the last whole second (transferredByteInSecond), from a running count."""

    __slots__ = ("_since", "_total", "_window_start", "per_second")

    def __init__(self) -> None:
        self._total = self._since = 0
        self._window_start = 0.0
        self.per_second = 0

    def count(self, n: int) -> None:
        self._total += n

    def tick(self, now: float) -> None:
        if now - self._window_start >= 1.0:
            self.per_second = int((self._total - self._since) / max(now - self._window_start, 1.0))
            self._since, self._window_start = self._total, now


@implementer(interfaces.IPushProducer)
class HAConnection(Protocol):
    """One slave: reads its offset reports, streams the commitlog from the first one on."""

    def __init__(self, service: HAService) -> None:
        self.service = service
        self.decoder = ReportDecoder()
        # -1 until the first report: the master sends nothing before it (WriteSocketService).
        self.next_transfer_from = -1
        self.slave_ack_offset = -1
        # The master's max offset, and when, the last time everything it had was sent: a report reaching it
        # means the slave caught up then (AutoSwitchHAConnection's lastMasterMaxOffset/lastTransferTimeMs).
        self.last_master_max_offset = -1
        self.last_transfer_time = 0.0
        self.last_read = self.last_write = 0.0
        self.paused = False
        self._direct = False  # a plain TCP transport: frames may skip its buffer (gateway.remoting.direct)
        self.rate = TransferRate()

    def connectionMade(self) -> None:
        self.last_read = self.last_write = self.service.clock.seconds()
        self._direct = can_send_now(self.transport)
        set_no_delay(self.transport)  # HAConnection's: a SYNC_MASTER send waits for this link's round trip
        self.transport.registerProducer(self, True)
        self.service.connections.add(self)
        log.info("HA slave {peer} connected", peer=self.transport.getPeer())

    def connectionLost(self, reason: Any = None) -> None:
        self.service.connections.discard(self)
        log.info("HA slave {peer} gone: {reason}", peer=self.transport.getPeer(), reason=reason)

    def dataReceived(self, data: bytes) -> None:
        self.last_read = self.service.clock.seconds()
        try:
            offset = self.decoder.feed(data)
        except HAProtocolError as e:
            log.warn("HA slave {peer}: {error}", peer=self.transport.getPeer(), error=e)
            self.transport.abortConnection()
            return
        if offset is None:
            return
        self.slave_ack_offset = offset
        self.service.slave_reported(offset, self)
        if self.next_transfer_from < 0:
            store = self.service.store
            if offset == 0:
                # An empty slave starts at the beginning of the master's last commitlog segment.
                max_offset = store.commit_log.max_offset
                offset = max_offset - max_offset % store.commit_log.queue.mapped_file_size
            self.next_transfer_from = offset
            self._write(encode_transfer_header(offset, 0))
            self.transfer()
        # Later reports only acknowledge: new data goes out with the pushes (HAService.wakeup), as Apache's
        # ReadSocketService leaves the transfer to its WriteSocketService.

    # IPushProducer: the transport's buffer is full / drained.
    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self.transfer()

    def stopProducing(self) -> None:
        self.paused = True

    def _write(self, *parts: bytes) -> None:
        """One frame: to the socket at once when nothing waits in the transport's buffer (a SYNC_MASTER send
        waits for it), else after what does."""
        send_now(self.transport, list(parts), self._direct)
        self.last_write = self.service.clock.seconds()

    def transfer(self) -> None:
        """Send what the slave lacks, one batch per frame, until the transport asks us to pause."""
        if self.next_transfer_from < 0:
            return
        cl = self.service.store.commit_log
        batch = self.service.config.haTransferBatchSize
        while not self.paused and self.next_transfer_from < cl.max_offset:
            start = self.next_transfer_from
            f = cl.queue.find_mapped_file_by_offset(start)
            if f is None:
                log.warn("HA: commitlog offset {offset} is gone; dropping the slave", offset=start)
                self.transport.abortConnection()
                return
            # A frame never spans two segments, as Apache's selectMappedBuffer.
            size = min(batch, cl.max_offset - start, f.end_offset - start)
            pos = start - f.file_from_offset
            self._write(encode_transfer_header(start, size), f.view[pos : pos + size].tobytes())
            self.next_transfer_from = start + size
            self.rate.count(size)
        if self.next_transfer_from >= cl.max_offset:
            self.last_master_max_offset = cl.max_offset
            self.last_transfer_time = self.service.clock.seconds()

    def tick(self, now: float) -> None:
        """Housekeeping and header-only heartbeats."""
        self.rate.tick(now)
        cfg = self.service.config
        if now - self.last_read > cfg.haHousekeepingInterval / 1000:
            log.warn("HA slave {peer} silent; dropping it", peer=self.transport.getPeer())
            self.transport.abortConnection()
            return
        if self.next_transfer_from >= 0 and now - self.last_write >= cfg.haSendHeartbeatInterval / 1000:
            self._write(encode_transfer_header(self.next_transfer_from, 0))


class HAService(Factory):
    """Accepts slaves and pushes new commitlog data to them: in large frames after appends (``wakeup``), at once
    for a send that waits.

    For SYNC_MASTER it also answers sends waiting for a slave (``notify_replica``, GroupTransferService).
    """

    # Apache's WriteSocketService also polls every 100 ms when nobody wakes it.
    TICK = 0.1
    # Unsent transfer batches that push without waiting for the tick.
    PUSH_BATCHES = 4

    def __init__(self, store: DefaultMessageStore, config: HAConfig, clock: Any) -> None:
        """``clock`` is the reactor (it also listens)."""
        self.store = store
        self.config = config
        self.clock = clock
        self.connections: set[HAConnection] = set()
        # push2SlaveMaxOffset: the highest offset any slave ever reported.
        self.push_to_slave_max_offset = 0
        self._replica_waiters = OffsetWaiters(clock)
        # Controller mode: slaves that named themselves (encode_identity), and who is told when one caught up.
        self.caught_up_at: dict[int, float] = {}
        self.on_slave_report: Callable[[int, int], None] | None = None
        self.ack_policy: Callable[[], int] | None = None
        self._wakeup_pending = False
        # Where the commitlog ended at the last push, and how much more wakes the next one.
        self._pushed_to = 0
        self._push_threshold = self.PUSH_BATCHES * config.haTransferBatchSize
        self._loop = LoopingCall(self._tick)
        self._loop.clock = clock
        self.port: Any = None

    def buildProtocol(self, addr: Any) -> HAConnection:
        return HAConnection(self)

    def start(self, port: int, interface: str, wrap: Callable[[Factory], Any] | None = None) -> int:
        """Listen on ``port`` (0: ephemeral) and start the heartbeat/housekeeping/poll loop; returns the port.

        ``wrap`` (the broker's TLS server) serves the link over TLS as its mode says."""
        self.port = self.clock.listenTCP(port, wrap(self) if wrap is not None else self, interface=interface)
        self._loop.start(self.TICK, now=False)
        return self.port.getHost().port

    def stop(self) -> Deferred[Any]:
        """Stop listening and the loop, and drop every slave."""
        if self._loop.running:
            self._loop.stop()
        for conn in list(self.connections):
            conn.transport.abortConnection()
        self._replica_waiters.expire(everything=True)
        port, self.port = self.port, None
        return maybeDeferred(port.stopListening) if port is not None else succeed(None)

    def wakeup(self) -> None:
        """New data was appended. Nobody waits for it (ASYNC_MASTER, or a send that does not wait): it goes out
        once ``PUSH_BATCHES`` transfer batches are unsent, or with the next tick, as Apache's WriteSocketService
        wakes every 100 ms for it; every slave then gets it in a few large frames instead of one frame a reactor
        turn, which costs both brokers a system call and a turn each. A SYNC_MASTER send pushes at once
        (:meth:`notify_replica`)."""
        # Called for every stored message: a broker without slaves (most) stops at the first test.
        if (
            self.connections
            and not self._wakeup_pending
            and self.store.commit_log.max_offset - self._pushed_to >= self._push_threshold
        ):
            self._push_soon()

    def _push_soon(self) -> None:
        """Push to every slave at the end of this reactor turn, once for all its appends."""
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self.clock.callLater(0, self._push)

    def _push(self) -> None:
        self._wakeup_pending = False
        self._pushed_to = self.store.commit_log.max_offset
        for conn in list(self.connections):
            conn.transfer()

    def slave_reported(self, offset: int, conn: HAConnection) -> None:
        """``conn``'s slave holds the commitlog up to ``offset``: answer the sends that waited for it."""
        if offset > self.push_to_slave_max_offset:
            self.push_to_slave_max_offset = offset
        broker_id = conn.decoder.slave_broker_id
        if broker_id is not None and 0 <= conn.last_master_max_offset <= offset:
            # Controller mode: when each slave last held everything (connectionCaughtUpTimeTable).
            self.caught_up_at[broker_id] = conn.last_transfer_time
            if self.on_slave_report is not None:
                self.on_slave_report(broker_id, offset)
        self.release_acknowledged()

    def release_acknowledged(self) -> None:
        """Answer the sends now acknowledged (after a report, or when the set of slaves waited for shrank)."""
        self._replica_waiters.release(self.acknowledged_offset())

    def acknowledged_offset(self) -> int:
        """How far enough slaves hold the commitlog for a SYNC_MASTER send: any one slave (4.x), or what the
        controller-mode ``ack_policy`` says (inSyncReplicas, allAckInSyncStateSet)."""
        return self.ack_policy() if self.ack_policy is not None else self.push_to_slave_max_offset

    def is_slave_ok(self, master_put_where: int) -> bool:
        """A slave is connected and at most ``haMaxGapNotInSync`` behind ``master_put_where`` (isSlaveOK).

        Always true in controller mode (an ``ack_policy``): there the SyncStateSet says whom a send waits for
        and a master alone in it acknowledges at once, as RocketMQ 5 does."""
        if self.ack_policy is not None:
            return True
        return (
            bool(self.connections) and master_put_where - self.push_to_slave_max_offset < self.config.haMaxGapNotInSync
        )

    def notify_replica(self, offset: int, callback: Callable[[Any], object], replicated: Any, timed_out: Any) -> Any:
        """``replicated`` once a slave reports ``offset``, ``timed_out`` after ``slaveTimeout`` (FLUSH_SLAVE_TIMEOUT):
        the answer now if there is one, else None and ``callback`` gets it later. Neither value may be None."""
        if self.acknowledged_offset() >= offset:
            return replicated
        if self.port is None:
            return timed_out
        self._replica_waiters.add(offset, self.config.slaveTimeout / 1000, callback, replicated, timed_out)
        self._push_soon()
        return None

    def runtime_info(self) -> dict[str, Any]:
        """A master's HARuntimeInfo (mqadmin haStatus): each slave's acknowledged offset, gap and rate."""
        put_where = self.store.commit_log.max_offset
        connections = []
        for conn in self.connections:
            peer = conn.transport.getPeer()
            gap = put_where - conn.slave_ack_offset
            connections.append(
                {
                    "addr": f"{peer.host}:{peer.port}",
                    "slaveAckOffset": conn.slave_ack_offset,
                    "diff": gap,
                    "inSync": gap < self.config.haMaxGapNotInSync,
                    "transferredByteInSecond": conn.rate.per_second,
                    "transferFromWhere": conn.next_transfer_from,
                }
            )
        return {
            "master": True,
            "masterCommitLogMaxOffset": put_where,
            "inSyncSlaveNums": sum(c["inSync"] for c in connections),
            "haConnectionInfo": connections,
            "haClientRuntimeInfo": {"activated": False},
        }

    def slave_fall_behind(self) -> int:
        """Bytes the furthest slave lags behind (slaveFallBehindMuch)."""
        return self.store.commit_log.max_offset - self.push_to_slave_max_offset

    def _tick(self) -> None:
        now = self.clock.seconds()
        for conn in list(self.connections):
            conn.tick(now)
        self._push()
