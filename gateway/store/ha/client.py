"""Slave side of 4.x replication: HAClient follows the master's HA port and appends what it streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.remoting.client import EndpointFactory, split_addr, tcp_endpoint
from gateway.remoting.direct import can_send_now, send_now, set_no_delay

from ..message_store import DefaultMessageStore
from .codec import HAProtocolError, TransferDecoder, encode_identity, encode_report
from .service import HAConfig, TransferRate

log = Logger()


class HAClientProtocol(Protocol):
    """One link to the master: reports the slave's max offset, appends each transfer at its offset."""

    def __init__(self, client: HAClient, address: str = "") -> None:
        self.client = client
        self.address = address  # the master's HA address this link was made to
        self.decoder = TransferDecoder(max(client.config.haTransferBatchSize, 4 * 1024 * 1024))
        self.last_read = self.last_write = 0.0
        self._direct = False  # a plain TCP transport: reports may skip its buffer (gateway.remoting.direct)

    def connectionMade(self) -> None:
        self.last_read = self.client.clock.seconds()
        self._direct = can_send_now(self.transport)
        set_no_delay(self.transport)  # as HAClient's socket (RemotingUtil.connect): reports go out at once
        self.client.link = self
        if self.client.broker_id is not None:
            self.transport.write(encode_identity(self.client.broker_id))
        # Apache waits one heartbeat interval before the first report; reporting at once only saves time.
        self.report()

    def connectionLost(self, reason: Any = None) -> None:
        if self.client.link is self:
            self.client.link = None
        log.info("HA link to master closed: {reason}", reason=reason)

    def report(self) -> None:
        """Tell the master our max commitlog offset (past the socket's buffer when it is empty: a SYNC_MASTER
        send waits for this)."""
        send_now(self.transport, [encode_report(self.client.store.commit_log.max_offset)], self._direct)
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
                    self.client.rate.count(len(transfer.data))
                    if not store.append_to_commit_log(transfer.phy_offset, transfer.data):
                        raise HAProtocolError(f"cannot append at {transfer.phy_offset}")
                    appended = True
        except HAProtocolError as e:
            log.warn("HA link to master: {error}; reconnecting", error=e)
            self.transport.abortConnection()
        else:
            if appended:
                self.report()
        # As Apache's HAClient: the report follows the append, and the consume queues and index are built after
        # it (its ReputMessageService), so a SYNC_MASTER send does not wait for them.
        if appended:
            store.dispatch_appended()

    def tick(self, now: float) -> None:
        """Periodic report and housekeeping."""
        self.client.rate.tick(now)
        cfg = self.client.config
        if now - self.last_read > cfg.haHousekeepingInterval / 1000:
            log.warn("HA link to master silent; dropping it")
            self.transport.abortConnection()
        elif now - self.last_write >= cfg.haSendHeartbeatInterval / 1000:
            self.report()


class HAClient:
    """Keeps one link to the master's HA address, reconnecting every heartbeat interval.

    ``master_address`` returns ``host:port`` (haMasterAddress, or what the NameServer said), "" if unknown.
    ``broker_id`` (controller mode) is sent first on every link so that the master knows the slave.
    """

    TICK = 1.0

    def __init__(
        self,
        store: DefaultMessageStore,
        config: HAConfig,
        reactor: Any,
        master_address: Callable[[], str],
        endpoint_factory: EndpointFactory = tcp_endpoint,
    ) -> None:
        self.store = store
        self.config = config
        self.reactor = reactor
        self.clock = reactor
        self.master_address = master_address
        # TLS when the broker's client settings turn it on (tlsEnable), as for its other links.
        self.endpoint_factory = endpoint_factory
        self.broker_id: int | None = None
        self.rate = TransferRate()
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

    def runtime_info(self) -> dict[str, Any]:
        """A slave's HARuntimeInfo (mqadmin haStatus): whom it follows, how far, and how fresh the link is."""
        link = self.link
        return {
            "master": False,
            "masterCommitLogMaxOffset": 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {
                "masterAddr": self.master_address(),
                "transferredByteInSecond": self.rate.per_second,
                "maxOffset": self.store.commit_log.max_offset,
                "lastReadTimestamp": int(link.last_read * 1000) if link is not None else 0,
                "lastWriteTimestamp": int(link.last_write * 1000) if link is not None else 0,
                "masterFlushOffset": 0,
                "activated": link is not None,
            },
        }

    def _tick(self) -> None:
        now = self.clock.seconds()
        if self.link is not None:
            if self.link.address != self.master_address():
                log.info("HA master address changed; dropping the link to {old}", old=self.link.address)
                self.link.transport.abortConnection()
                return
            self.link.tick(now)
            return
        address = self.master_address()
        if self._connecting or not address:
            return
        if now - self._last_attempt < self.config.haSendHeartbeatInterval / 1000:
            return
        self._last_attempt = now
        host, port = split_addr(address)
        self._connecting = True
        d = self.endpoint_factory(self.reactor, host, port).connect(
            Factory.forProtocol(lambda: HAClientProtocol(self, address))
        )

        def done(result: Any) -> None:
            self._connecting = False
            if isinstance(result, Protocol) and not self._loop.running:
                result.transport.abortConnection()  # stopped while connecting
            elif not isinstance(result, Protocol):
                log.info("HA connect to {addr} failed: {why}", addr=address, why=result.getErrorMessage())

        d.addBoth(done)
