"""Broker → NameServer registration (BrokerOuterAPI): register at start, periodically, and on topic changes.

Topic changes are coalesced: a burst of new topics (auto-created on send, retry topics of new groups) costs
one registration of the changes, with at most one in flight and one more after it for later changes.

A NameServer takes a registration's topics only when it does not know this broker yet or the data version
moved. One that lost this broker (its channel closed, the broker expired, the NameServer restarted or was
added) and then hears of a change takes those topics as the whole table, with the current data version, so
the next full registration after changes carries a new data version and every NameServer takes it all again.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)

from .coalesce import Coalescer

if TYPE_CHECKING:
    from .controller import BrokerController

log = Logger()

# Topic changes within this many seconds share one registration.
CHANGE_DELAY = 0.1


class BrokerRegistration:
    """Keeps this broker registered with every NameServer over long-lived connections."""

    def __init__(self, broker: BrokerController, client: RemotingClient) -> None:
        self.broker = broker
        self.client = client
        self.master_addr: str | None = None
        self.ha_master_addr: str | None = None
        self.registered_ids: set[int] = set()
        # Controller mode: nothing is registered before the controller has said who is master.
        self.on_hold = False
        # DLedger mode: whether this master may still register as brokerId 0 (DLedgerRoles.holds_lease).
        self.master_lease: Callable[[], bool] | None = None
        # Whether a NameServer has accepted a registration yet, and who waits for that (the ready line).
        self.accepted = False
        self._accepted_waiters: list[defer.Deferred[None]] = []
        # Topics changed since the last registration of changes.
        self._changed: set[str] = set()
        # Changes were registered since the last full registration.
        self._changes_sent = False
        self._changes = Coalescer(broker.reactor, self._register_changes, CHANGE_DELAY, "registering topic changes")

    def first_accepted(self) -> defer.Deferred[None]:
        """Fires once a NameServer has accepted this broker's registration (at once if one has, or if there is
        no NameServer to register with)."""
        if self.accepted or not self.broker.config.namesrv_addrs:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._accepted_waiters.append(d)
        return d

    def topics_changed(self, *topics: str) -> None:
        """Register ``topics`` soon, with the table's data version (Apache's registerIncrementBrokerData,
        coalesced): a NameServer keeps the topics a registration leaves out, so the body grows with the
        changes, not with the table."""
        self._changed.update(topics)
        self._changes.request()

    def topics_registered(self) -> defer.Deferred[None]:
        """Fires once every topic change so far has been registered (the registration starts next turn)."""
        return self._changes.flush()

    def drop_changes(self) -> None:
        """Forget the topic changes not yet registered: a full registration is about to carry them (start-up,
        whose state files create system topics), or the broker is about to unregister (stop)."""
        self._changed.clear()
        self._changes.cancel()

    def _body(self, wrapper: TopicConfigSerializeWrapper) -> bytes:
        perm = self.broker.config.brokerPermission
        if not (perm & PermName.PERM_READ and perm & PermName.PERM_WRITE):
            # A broker that is not read-write registers every topic with its own permission.
            wrapper = TopicConfigSerializeWrapper(
                {
                    name: TopicConfig(
                        tc.topic_name,
                        tc.read_queue_nums,
                        tc.write_queue_nums,
                        perm,
                        tc.topic_filter_type,
                        tc.topic_sys_flag,
                        tc.order,
                    )
                    for name, tc in wrapper.topic_config_table.items()
                },
                wrapper.data_version,
            )
        return fastjson.dumps(RegisterBrokerBody(wrapper, []))

    def register_periodically(self) -> defer.Deferred[Any]:
        """Every registerNameServerPeriod: :meth:`register_all`; with ``forceRegister=false`` only when a
        NameServer holds another data version or could not be asked (Apache's needRegister), or changes
        were registered since the last full registration."""
        if self.broker.config.forceRegister or self._changes_sent:
            return self.register_all()
        return self._need_register().addCallback(lambda need: self.register_all() if need else None)

    def register_all(self) -> defer.Deferred[Any]:
        """REGISTER_BROKER with every topic to every NameServer; fires when all have answered or failed."""
        if self._changes_sent and self._may_register():
            self._changes_sent = False
            self.broker.topics.data_version.next_version()
        return self._register(self.broker.topics.wrapper())

    def _register_changes(self) -> defer.Deferred[Any]:
        topics = self.broker.topics
        names, self._changed = self._changed, set()
        changed = {n: tc for n in names if (tc := topics.select(n)) is not None}
        self._changes_sent = self._changes_sent or self._may_register()
        return self._register(TopicConfigSerializeWrapper(changed, topics.data_version))

    def _may_register(self) -> bool:
        if not self.broker.config.namesrv_addrs or self.on_hold:
            return False
        return self.broker.config.brokerId != 0 or self.master_lease is None or self.master_lease()

    def _need_register(self) -> defer.Deferred[bool]:
        """QUERY_DATA_VERSION to every NameServer: True if any holds another data version or fails to answer.
        An unchanged answer refreshes this broker there, as a registration does."""
        if not self._may_register():
            return defer.succeed(False)
        cfg = self.broker.config
        version = replace(self.broker.topics.data_version)
        header = QueryDataVersionRequestHeader(
            broker_name=cfg.brokerName,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.brokerClusterName,
            broker_id=cfg.brokerId,
        ).encode()
        body = fastjson.dumps(version)
        timeout = cfg.registerBrokerTimeoutMills / 1000.0
        calls = []
        for addr in cfg.namesrv_addrs:
            req = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, dict(header), body, language="JAVA")
            d = self.client.invoke(addr, req, timeout).addCallback(self._version_changed, version)
            calls.append(d.addErrback(self._query_failed, addr))
        return defer.DeferredList(calls).addCallback(lambda results: any(changed for _ok, changed in results))

    @staticmethod
    def _version_changed(response: RemotingCommand, version: DataVersion) -> bool:
        if response.code != ResponseCode.SUCCESS:
            return False  # as Apache: an error answer is no change
        if QueryDataVersionResponseHeader.decode(response.ext_fields).changed:
            return True
        return bool(response.body) and DataVersion.from_json(fastjson.loads(response.body)) != version

    @staticmethod
    def _query_failed(failure: Any, addr: str) -> bool:
        # As Apache: no answer, or one that does not decode, counts as changed.
        log.warn(
            "query data version from name server {addr} failed: {error}", addr=addr, error=failure.getErrorMessage()
        )
        return True

    def _register(self, wrapper: TopicConfigSerializeWrapper) -> defer.Deferred[Any]:
        cfg = self.broker.config
        if not self._may_register():
            return defer.succeed(None)
        addrs = cfg.namesrv_addrs
        body = self._body(wrapper)
        self.registered_ids.add(cfg.brokerId)
        header = RegisterBrokerRequestHeader(
            broker_name=cfg.brokerName,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.brokerClusterName,
            ha_server_addr=cfg.ha_server_addr,
            broker_id=cfg.brokerId,
            compressed=False,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        ).encode()
        timeout = cfg.registerBrokerTimeoutMills / 1000.0
        calls = []
        for addr in addrs:
            req = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(header), body, language="JAVA")
            d = self.client.invoke(addr, req, timeout)
            d.addCallbacks(self._registered, self._failed, errbackArgs=(addr,))
            calls.append(d)
        return defer.DeferredList(calls)

    def _registered(self, response: RemotingCommand) -> None:
        if response.code != ResponseCode.SUCCESS:
            log.warn("register broker failed: {code} {remark}", code=response.code, remark=response.remark)
            return
        h = RegisterBrokerResponseHeader.decode(response.ext_fields)
        if h.master_addr:
            self.master_addr = h.master_addr
        if h.ha_server_addr:
            self.ha_master_addr = h.ha_server_addr
        # After the master's address is known: a slave's waiters may sync from it at once.
        if not self.accepted:
            self.accepted = True
            waiters, self._accepted_waiters = self._accepted_waiters, []
            for d in waiters:
                d.callback(None)

    @staticmethod
    def _failed(failure: Any, addr: str) -> None:
        log.warn("register broker to name server {addr} failed: {error}", addr=addr, error=failure.getErrorMessage())

    def unregister_other_ids(self, broker_id: int) -> None:
        """UNREGISTER_BROKER for every id this broker registered under but ``broker_id`` (a role change)."""
        for other in self.registered_ids - {broker_id}:
            self.unregister_all(other)

    def unregister_all(self, broker_id: int | None = None) -> defer.Deferred[Any]:
        """UNREGISTER_BROKER from every NameServer, as ``broker_id`` (the current id by default)."""
        cfg = self.broker.config
        broker_id = cfg.brokerId if broker_id is None else broker_id
        self.registered_ids.discard(broker_id)
        header = UnRegisterBrokerRequestHeader(
            broker_name=cfg.brokerName,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.brokerClusterName,
            broker_id=broker_id,
        ).encode()
        calls = []
        for addr in cfg.namesrv_addrs:
            req = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(header), language="JAVA")
            calls.append(self.client.invoke(addr, req, 3.0).addErrback(lambda f: None))
        return defer.DeferredList(calls)
