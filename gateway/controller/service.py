"""ControllerManager: RocketMQ 5's controller as a Twisted service, standalone or inside a NameServer.

It runs a Raft member (:mod:`gateway.controller.raft`), keeps the brokers' heartbeats, and answers the
controller requests. The leader scans for brokers gone silent every ``scanNotActiveBrokerInterval``; when
one was its group's master it elects another from the SyncStateSet and, with ``notifyBrokerRoleChanged``,
tells every live broker of the group (NOTIFY_BROKER_ROLE_CHANGED).
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.logger import Logger

from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.controller_protocol import NotifyBrokerRoleChangedRequestHeader
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingServerFactory
from gateway.tls.client import client_endpoint_factory
from gateway.tls.server import TlsServer

from .config import ControllerConfig
from .heartbeat import BrokerHeartbeatManager, BrokerLiveInfo
from .processor import ControllerRequestProcessor
from .raft import NotLeader, RaftNode
from .replicas import ReplicasInfoManager, Result

log = Logger()


class ControllerManager(Service):
    """One controller. With ``dispatcher`` (a NameServer's) its requests are served on that server's port;
    without, it listens on ``listenPort`` itself. ``raft_timeouts`` (seconds) are PySyncObj's election
    timeouts (tests shorten them)."""

    def __init__(
        self,
        config: ControllerConfig,
        reactor: Any = None,
        dispatcher: RequestDispatcher | None = None,
        raft_timeouts: tuple[float, float] = (0.4, 1.4),
        tls: TlsServer | None = None,
    ) -> None:
        """``tls``: the TLS settings (``tls.*``) of its listener (standalone) and of its calls to brokers."""
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.config = config
        self.reactor = reactor
        self.raft = RaftNode(
            config.self_addr, list(config.peers.values()), config.controllerStorePath, reactor, 5.0, raft_timeouts
        )
        self.heartbeats = BrokerHeartbeatManager(reactor, self._broker_inactive)
        self.processor = ControllerRequestProcessor(self)
        self.standalone = dispatcher is None
        self.dispatcher = dispatcher if dispatcher is not None else RequestDispatcher()
        self.dispatcher.register_all(self.processor.handlers())
        self.dispatcher.on_channel_closed.append(self.heartbeats.channel_closed)
        self.factory = RemotingServerFactory(self.dispatcher) if self.standalone else None
        self.tls = tls if tls is not None else TlsServer.from_system_properties(None, reactor)
        self.client = RemotingClient(reactor, endpoint_factory=client_endpoint_factory(self.tls.config))
        self._listening: Any = None
        self._scan = task.LoopingCall(self._scan_brokers)
        self._was_leader = False
        self._scan.clock = reactor

    @property
    def replicas(self) -> ReplicasInfoManager:
        return self.raft.replicas

    @property
    def port(self) -> int:
        """The remoting port of a standalone controller (useful with ``listenPort=0``)."""
        if self._listening is None:
            raise RuntimeError("the controller does not listen on its own")
        return int(self._listening.getHost().port)

    def startService(self) -> None:
        super().startService()
        self.raft.start()
        if self.factory is not None:
            self.tls.start()
            self._listening = self.reactor.listenTCP(
                self.config.listenPort, self.tls.wrap(self.factory), interface=self.config.bindAddress
            )
        self._scan.start(self.config.scanNotActiveBrokerInterval / 1000, now=False)
        log.info(
            "controller {id} ({addr}) of group {group} started with peers {peers}",
            id=self.config.controllerDLegerSelfId,
            addr=self.config.self_addr,
            group=self.config.controllerDLegerGroup,
            peers=self.config.controllerDLegerPeers,
        )

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        super().stopService()
        if self._scan.running:
            self._scan.stop()
        self.raft.stop()
        yield self.client.close()
        if self._listening is not None:
            yield self._listening.stopListening()
            self._listening = None
        if self.factory is not None:
            self.tls.stop()
            yield self.factory.close_all()

    # -- elections

    def _scan_brokers(self) -> None:
        """scanNotActiveBroker; a controller that has just become leader first expects a heartbeat from every
        broker of the replicated state, so that a master that died while the leadership moved is noticed."""
        leader = self.raft.is_leader
        if leader and not self._was_leader:
            for group in self.replicas.groups.values():
                for broker_id, (addr, _) in group.brokers.items():
                    self.heartbeats.expect(group.cluster_name, group.broker_name, broker_id, addr)
        self._was_leader = leader
        self.heartbeats.scan()

    def check_elect(self, broker_name: str, broker_id: int | None, designate: bool) -> Result:
        """ELECT_MASTER checked against the live brokers (a request, or the controller itself with None)."""
        return self.replicas.check_elect_master(
            broker_name,
            broker_id,
            designate,
            self.heartbeats.is_alive,
            self.heartbeats.live_info,
            self.config.enableElectUncleanMaster,
        )

    def _broker_inactive(self, info: BrokerLiveInfo) -> None:
        """A broker went silent: if it was its group's master, the leader elects another."""
        group = self.replicas.groups.get(info.broker_name)
        if not self.running or not self.raft.is_leader or group is None or group.master_broker_id != info.broker_id:
            return  # (stopping closes every connection: that says nothing of the brokers)
        log.warn(
            "master {id} of {name} is gone (epoch {epoch}); electing a new one",
            id=info.broker_id,
            name=info.broker_name,
            epoch=group.master_epoch,
        )
        request = RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER)
        d = self.processor.run(request, lambda: self.check_elect(info.broker_name, None, False))

        def elected(resp: RemotingCommand) -> None:
            if resp.code == ResponseCode.SUCCESS:
                ext = resp.ext_fields or {}
                log.info(
                    "{name}: broker {id} ({addr}) elected master of epoch {epoch}",
                    name=info.broker_name,
                    id=ext.get("masterBrokerId"),
                    addr=ext.get("masterAddress"),
                    epoch=ext.get("masterEpoch"),
                )
                self.notify_role_changed(info.broker_name)
            else:
                log.warn("{name}: no new master ({remark})", name=info.broker_name, remark=resp.remark)

        d.addCallbacks(elected, lambda f: f.trap(NotLeader))

    def notify_role_changed(self, broker_name: str) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED to every live broker of the group (notifyBrokerRoleChanged)."""
        group = self.replicas.groups.get(broker_name)
        if not self.config.notifyBrokerRoleChanged or group is None or group.master_broker_id is None:
            return
        header = NotifyBrokerRoleChangedRequestHeader(
            master_address=group.address(group.master_broker_id),
            master_epoch=group.master_epoch,
            sync_state_set_epoch=group.sync_state_set_epoch,
            master_broker_id=group.master_broker_id,
        ).encode()
        for info in self.heartbeats.alive_in_group(broker_name):
            request = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, dict(header))
            self.client.invoke(info.broker_addr, request, 3.0).addErrback(
                lambda f, addr=info.broker_addr: log.info(
                    "role change notice to {addr} failed: {error}", addr=addr, error=f.getErrorMessage()
                )
            )

    def replicas_info(self, broker_names: list[str]) -> dict[str, Any]:
        """BrokerReplicasInfo for mqadmin getSyncStateSet."""
        table = {}
        for name in broker_names:
            group = self.replicas.groups.get(name)
            if group is None:
                continue

            def identity(broker_id: int, name: str = name, group: Any = group) -> dict[str, Any]:
                return {
                    "brokerName": name,
                    "brokerId": broker_id,
                    "brokerAddress": group.address(broker_id),
                    "alive": self.heartbeats.is_alive(name, broker_id),
                }

            table[name] = {
                "masterBrokerId": group.master_broker_id,
                "masterAddress": group.address(group.master_broker_id),
                "masterEpoch": group.master_epoch,
                "syncStateSetEpoch": group.sync_state_set_epoch,
                "inSyncReplicas": [identity(b) for b in sorted(group.sync_state_set)],
                "notInSyncReplicas": [identity(b) for b in sorted(set(group.brokers) - group.sync_state_set)],
            }
        return {"replicasInfoTable": table}
