"""Slave side of 4.x replication: HAClient follows the master's HA port and appends what it streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from ..message_store import DefaultMessageStore
from .codec import HAProtocolError, TransferDecoder, encode_report
from .service import HAConfig

log = Logger()


class HAClientProtocol(Protocol):
    """One link to the master: reports the slave's max offset, appends each transfer at its offset."""

    def __init__(self, client: HAClient) -> None:
        self.client = client
        self.decoder = TransferDecoder(max(client.config.haTransferBatchSize, 4 * 1024 * 1024))
        self.last_read = self.last_write = 0.0

    def connectionMade(self) -> None:
        self.last_read = self.client.clock.seconds()
        self.client.link = self
        # Apache waits one heartbeat interval before the first report; reporting at once only saves time.
        self.report()

    def connectionLost(self, reason: Any = None) -> None:
        if self.client.link is self:
            self.client.link = None
        log.info("HA link to master closed: {reason}", reason=reason)

    def report(self) -> None:
        """Tell the master our max commitlog offset."""
        self.transport.write(encode_report(self.client.store.commit_log.max_offset))
        self.last_write = self.client.clock.seconds()

    def dataReceived(self, data: bytes) -> None:
        self.last_read = self.client.clock.seconds()
        store = self.client.store
        appended = False
        try:
            for transfer in self.decoder.feed(data):
                slave_offset = store.commit_log.max_offset
                if slave_offset != 0 and transfer.phy_offset != slave_offset:
                    raise HAProtocolError(f"master sent offset {transfer.phy_offset}, slave is at {slave_offset}")
                if transfer.data:
                    if not store.append_to_commit_log(transfer.phy_offset, transfer.data):
                        raise HAProtocolError(f"cannot append at {transfer.phy_offset}")
                    appended = True
        except HAProtocolError as e:
            log.warn("HA link to master: {error}; reconnecting", error=e)
            self.transport.abortConnection()
            return
        if appended:
            self.report()

    def tick(self, now: float) -> None:
        """Periodic report and housekeeping."""
        cfg = self.client.config
        if now - self.last_read > cfg.haHousekeepingInterval / 1000:
            log.warn("HA link to master silent; dropping it")
            self.transport.abortConnection()
        elif now - self.last_write >= cfg.haSendHeartbeatInterval / 1000:
            self.report()


class HAClient:
    """Keeps one link to the master's HA address, reconnecting every heartbeat interval.

    ``master_address`` returns ``host:port`` (haMasterAddress, or what the NameServer said), "" if unknown.
    """

    TICK = 1.0

    def __init__(
        self, store: DefaultMessageStore, config: HAConfig, reactor: Any, master_address: Callable[[], str]
    ) -> None:
        self.store = store
        self.config = config
        self.reactor = reactor
        self.clock = reactor
        self.master_address = master_address
        self.link: HAClientProtocol | None = None
        self._connecting = False
        self._last_attempt = float("-inf")
        self._loop = LoopingCall(self._tick)
        self._loop.clock = reactor

    def start(self) -> None:
        """Connect now and keep the link up."""
        self._loop.start(self.TICK, now=True)

    def stop(self) -> None:
        """Stop reconnecting and drop the link."""
        if self._loop.running:
            self._loop.stop()
        if self.link is not None:
            self.link.transport.abortConnection()

    def _tick(self) -> None:
        now = self.clock.seconds()
        if self.link is not None:
            self.link.tick(now)
            return
        address = self.master_address()
        if self._connecting or not address:
            return
        if now - self._last_attempt < self.config.haSendHeartbeatInterval / 1000:
            return
        self._last_attempt = now
        host, _, port = address.rpartition(":")
        self._connecting = True
        d = TCP4ClientEndpoint(self.reactor, host, int(port), timeout=3).connect(
            Factory.forProtocol(lambda: HAClientProtocol(self))
        )

        def done(result: Any) -> None:
            self._connecting = False
            if isinstance(result, Protocol) and not self._loop.running:
                result.transport.abortConnection()  # stopped while connecting
            elif not isinstance(result, Protocol):
                log.info("HA connect to {addr} failed: {why}", addr=address, why=result.getErrorMessage())

        d.addBoth(done)
