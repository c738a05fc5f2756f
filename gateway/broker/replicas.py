"""Controller mode (``enableControllerMode``): the broker's side of RocketMQ 5's controller (ReplicasManager).

The broker gets its id from the controller (GET_NEXT_BROKER_ID, APPLY_BROKER_ID, kept in
``brokerIdentity.json``), registers (CONTROLLER_REGISTER_BROKER) and sends BROKER_HEARTBEAT every
``brokerHeartbeatInterval``. The controller names the group's master: in a REGISTER or ELECT_MASTER answer,
in GET_REPLICA_INFO (polled every ``syncControllerMetadataPeriod``), or pushed with NOTIFY_BROKER_ROLE_CHANGED.
A broker named master cuts any partial record it replicated, opens a new epoch at its commitlog's end
(``epochFileCheckpoint``), and serves; as master it keeps the group's SyncStateSet current: a slave joins once
it holds everything from the epoch's start, and leaves after ``haMaxTimeSlaveNotCatchup`` ms without catching
up (CONTROLLER_ALTER_SYNC_STATE_SET). A broker named slave asks the master for its epoch history
(GET_BROKER_EPOCH_CACHE), truncates its commitlog where the two histories part (a former master's
unacknowledged tail), takes the master's history, and follows the master's HA port (learned with
GET_BROKER_CONFIG) as a 4.x slave that names itself. Stock clients see only routes: the NameServers are told
of every change at once (the master registers as brokerId 0, a slave under its controller id).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, task
from twisted.logger import Logger

from gateway.config import parse_properties
from gateway.persist import write_atomically
from gateway.remoting import fastjson
from gateway.remoting.client import split_addr
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.controller_protocol import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from gateway.store.ha.epoch import FILE_NAME as EPOCH_FILE
from gateway.store.ha.epoch import EpochFileCache, find_consistent_point

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from .controller import BrokerController

log = Logger()

IDENTITY_FILE = "brokerIdentity.json"
_TIMEOUT = 3.0


class ControllerUnavailable(Exception):
    """No controller answered as the leader."""


class ReplicasManager:
    """Registers with the controller, follows its decisions, and reports this broker's replicas."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        cfg = broker.config
        root = Path(broker.store_config.storePathRootDir)
        self.identity_path = root / IDENTITY_FILE
        self.epochs = EpochFileCache(root / EPOCH_FILE)
        # The role a master of this broker takes: SYNC_MASTER waits for a slave, as in 4.x.
        self.master_role = "SYNC_MASTER" if cfg.brokerRole == "SYNC_MASTER" else "ASYNC_MASTER"
        self.client = broker.namesrv_client
        self.broker_id: int | None = None
        self.leader: str | None = None
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.master_ha_addr = ""
        self.master_epoch = -1
        self.sync_state_set: set[int] = set()
        self.sync_state_set_epoch = 0
        self.role_known = False
        self._ready: defer.Deferred[None] = defer.Deferred()
        self._loops: list[task.LoopingCall] = []
        self._changing: defer.Deferred[Any] | None = None
        self._altering = False
        self._registering = False

    # -- lifecycle

    def start(self) -> defer.Deferred[None]:
        """Load the id and epochs, start registering and heartbeats; fires once the role is known (or after
        ``registerBrokerTimeoutMills``, so a broker whose controller is down still starts)."""
        self.epochs.load()
        self._load_identity()
        cfg = self.broker.config
        self._every(cfg.brokerHeartbeatInterval / 1000, self._heartbeat)
        self._every(cfg.syncControllerMetadataPeriod / 1000, self._sync_replica_info)
        self._every(cfg.checkSyncStateSetPeriod / 1000, self._check_sync_state_set, now=False)
        ready: defer.Deferred[None] = defer.Deferred()
        self._ready.addBoth(lambda r: ready.called or ready.callback(None))
        self.broker.reactor.callLater(
            cfg.registerBrokerTimeoutMills / 1000, lambda: ready.called or ready.callback(None)
        )
        return ready

    def stop(self) -> defer.Deferred[Any]:
        """Stop the loops; wait for a role change under way."""
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        ha = self.broker.ha_client
        if ha is not None:
            ha.stop()
        return self._changing if self._changing is not None else defer.succeed(None)

    def _every(self, seconds: float, fn: Any, now: bool = True) -> None:
        loop = task.LoopingCall(fn)
        loop.clock = self.broker.reactor
        loop.start(seconds, now=now).addErrback(lambda f: log.failure("controller-mode task failed", f))
        self._loops.append(loop)

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.notify_broker_role_changed,
            RequestCode.GET_BROKER_EPOCH_CACHE: self.get_broker_epoch_cache,
        }

    # -- identity

    def _load_identity(self) -> None:
        try:
            data = json.loads(self.identity_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.error(
                "{path} unreadable ({error}); asking the controller for a new id", path=self.identity_path, error=e
            )
            return
        cfg = self.broker.config
        if data.get("clusterName") == cfg.brokerClusterName and data.get("brokerName") == cfg.brokerName:
            self.broker_id = int(data["brokerId"])

    def _save_identity(self, broker_id: int) -> None:
        cfg = self.broker.config
        body = {"clusterName": cfg.brokerClusterName, "brokerName": cfg.brokerName, "brokerId": broker_id}
        write_atomically(self.identity_path, json.dumps(body).encode())

    # -- talking to the controller

    @defer.inlineCallbacks
    def _find_leader(self) -> Any:
        for addr in self.broker.config.controller_addrs:
            try:
                resp = yield self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO), _TIMEOUT
                )
            except Exception:
                continue
            if resp.code != ResponseCode.SUCCESS:
                continue
            # As Apache's broker: the controller that says it leads; controllerLeaderAddress is a Raft address.
            if GetMetaDataResponseHeader.decode(resp.ext_fields).is_leader:
                return addr
        raise ControllerUnavailable(f"no controller leader among {self.broker.config.controllerAddr}")

    @defer.inlineCallbacks
    def _call(self, code: int, header: Any = None, body: bytes | None = None) -> Any:
        """One request to the controller leader; a NOT_LEADER answer sends it to the new leader once."""
        for _ in range(2):
            if self.leader is None:
                self.leader = yield self._find_leader()
            req = RemotingCommand.request(code, header.encode() if header is not None else None, body or b"")
            try:
                resp = yield self.client.invoke(self.leader, req, _TIMEOUT)
            except Exception:
                self.leader = None
                raise
            if resp.code != ResponseCode.CONTROLLER_NOT_LEADER:
                return resp
            self.leader = None
        return resp

    @defer.inlineCallbacks
    def _register(self) -> Any:
        """Get an id if we have none, register, and take the role the controller gives."""
        cfg = self.broker.config
        if self.broker_id is None:
            resp = yield self._call(
                RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                GetNextBrokerIdRequestHeader(cfg.brokerClusterName, cfg.brokerName),
            )
            _expect(resp, "get next broker id")
            next_id = GetNextBrokerIdResponseHeader.decode(resp.ext_fields).next_broker_id
            check_code = f"{cfg.broker_addr};{int(time.time() * 1000)}"
            resp = yield self._call(
                RequestCode.CONTROLLER_APPLY_BROKER_ID,
                ApplyBrokerIdRequestHeader(cfg.brokerClusterName, cfg.brokerName, next_id, check_code),
            )
            _expect(resp, f"apply broker id {next_id}")
            self._save_identity(next_id)
            self.broker_id = next_id
            log.info("controller gave broker {name} the id {id}", name=cfg.brokerName, id=next_id)
        resp = yield self._call(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            RegisterBrokerToControllerRequestHeader(
                cfg.brokerClusterName, cfg.brokerName, self.broker_id, cfg.broker_addr
            ),
        )
        _expect(resp, "register broker to controller")
        h = RegisterBrokerToControllerResponseHeader.decode(resp.ext_fields)
        if h.master_address and h.master_broker_id is not None:
            yield self._follow_decision(
                h.master_broker_id, h.master_address, h.master_epoch or 0, h.sync_state_set_epoch
            )
        else:
            yield self._elect()

    @defer.inlineCallbacks
    def _elect(self) -> Any:
        """No master: ask the controller to elect one (this broker, if it may be)."""
        cfg = self.broker.config
        resp = yield self._call(
            RequestCode.CONTROLLER_ELECT_MASTER,
            ElectMasterRequestHeader(cfg.brokerClusterName, cfg.brokerName, self.broker_id),
        )
        h = ElectMasterResponseHeader.decode(resp.ext_fields)
        if resp.code == ResponseCode.SUCCESS and h.master_address:
            yield self._follow_decision(
                h.master_broker_id, h.master_address, h.master_epoch or 0, h.sync_state_set_epoch
            )
        else:
            log.info(
                "controller elected no master for {name}: {code} {remark}",
                name=cfg.brokerName,
                code=resp.code,
                remark=resp.remark,
            )

    @defer.inlineCallbacks
    def _heartbeat(self) -> Any:
        if self.broker_id is None or not self.role_known:
            yield self._register_quietly()
            return
        cfg = self.broker.config
        max_offset = self.broker.store.get_max_phy_offset()
        header = BrokerHeartbeatRequestHeader(
            cluster_name=cfg.brokerClusterName,
            broker_addr=cfg.broker_addr,
            broker_name=cfg.brokerName,
            broker_id=self.broker_id,
            epoch=self.epochs.last_epoch,
            max_offset=max_offset,
            confirm_offset=max_offset,
            heartbeat_timeout_mills=cfg.controllerHeartBeatTimeoutMills,
            election_priority=cfg.brokerElectionPriority,
        )
        try:
            yield self._call(RequestCode.BROKER_HEARTBEAT, header)
        except Exception as e:
            log.info("heartbeat to controller failed: {error}", error=e)

    @defer.inlineCallbacks
    def _register_quietly(self) -> Any:
        if self._changing is not None or self._registering:
            return
        self._registering = True
        try:
            yield self._register()
        except Exception as e:
            log.info("registering with the controller failed ({error}); retrying", error=e)
        finally:
            self._registering = False

    @defer.inlineCallbacks
    def _sync_replica_info(self) -> Any:
        """Poll the group's master, in case a NOTIFY_BROKER_ROLE_CHANGED was missed; elect when there is none."""
        if not self.role_known or self._changing is not None:
            return
        try:
            # Re-find the leader now and then (updateControllerMetadata): a follower also takes heartbeats.
            self.leader = yield self._find_leader()
            resp = yield self._call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(self.broker.config.brokerName)
            )
        except Exception as e:
            log.debug("replica info from controller failed: {error}", error=e)
            return
        if resp.code != ResponseCode.SUCCESS:
            return
        h = GetReplicaInfoResponseHeader.decode(resp.ext_fields)
        if not h.master_address or h.master_broker_id is None:
            yield self._elect()
        elif (h.master_epoch or 0) > self.master_epoch:
            yield self._follow_decision(h.master_broker_id, h.master_address, h.master_epoch or 0, None)

    # -- role changes

    def notify_broker_role_changed(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller: the group has a new master."""
        h = NotifyBrokerRoleChangedRequestHeader.decode(request.ext_fields)
        if h.master_address and h.master_broker_id is not None and (h.master_epoch or 0) > self.master_epoch:
            self._follow_decision(h.master_broker_id, h.master_address, h.master_epoch or 0, h.sync_state_set_epoch)
        return request.response(ResponseCode.SUCCESS)

    def _follow_decision(
        self, master_id: int, master_addr: str, epoch: int, sss_epoch: int | None
    ) -> defer.Deferred[Any]:
        """Become master or follow ``master_addr``, one change at a time, never going back to an older epoch."""
        if epoch < self.master_epoch or (epoch == self.master_epoch and self.role_known):
            return defer.succeed(None)
        if self._changing is not None:
            return self._changing.addCallback(lambda _: self._follow_decision(master_id, master_addr, epoch, sss_epoch))
        if master_id == self.broker_id:
            d = defer.maybeDeferred(self._change_to_master, epoch, sss_epoch)
        else:
            d = self._change_to_slave(master_id, master_addr, epoch)

        def done(result: Any) -> Any:
            self._changing = None
            return result

        def failed(f: Any) -> None:
            log.failure("role change to epoch {epoch} failed; the next poll retries", f, epoch=epoch)

        self._changing = d
        return d.addBoth(done).addErrback(failed)

    def _change_to_master(self, epoch: int, sss_epoch: int | None) -> defer.Deferred[Any]:
        broker = self.broker
        store = broker.store
        assert self.broker_id is not None
        if broker.ha_client is not None:
            broker.ha_client.stop()
        if broker.config.is_slave and self.role_known:
            # A partial record replicated before the old master died is not ours to serve.
            cut = store.truncate_files(store.replicated_whole_records_end)
            if cut:
                log.info("cut {bytes} bytes of a partial replicated record", bytes=cut)
        start = store.get_max_phy_offset()
        self.epochs.append(epoch, start)
        self.master_id, self.master_addr, self.master_ha_addr = self.broker_id, broker.config.broker_addr, ""
        self.master_epoch = epoch
        self.sync_state_set = {self.broker_id}
        if sss_epoch is not None:
            self.sync_state_set_epoch = sss_epoch
        ha = broker.ha_service
        if ha is not None:
            ha.on_slave_report = self._slave_reported
            ha.ack_policy = self._acknowledged_offset
        self._mark_known()
        log.info(
            "broker {name} ({id}) is master of epoch {epoch} from commitlog offset {offset}",
            name=broker.config.brokerName,
            id=self.broker_id,
            epoch=epoch,
            offset=start,
        )
        return broker.change_role(self.master_role, 0)

    @defer.inlineCallbacks
    def _change_to_slave(self, master_id: int, master_addr: str, epoch: int) -> Any:
        broker = self.broker
        store = broker.store
        assert self.broker_id is not None
        # Stop taking writes and serving slaves first.
        yield broker.change_role("SLAVE", self.broker_id, master_addr)
        if broker.ha_service is not None:
            broker.ha_service.on_slave_report = broker.ha_service.ack_policy = None
            for conn in list(broker.ha_service.connections):
                conn.transport.abortConnection()
        if broker.ha_client is not None:
            broker.ha_client.stop()
        their = yield self._master_epochs(master_addr)
        mine = self.epochs.entries(store.get_max_phy_offset())
        consistent = find_consistent_point(mine, their.epoch_list)
        if consistent < 0:
            # No shared epoch: either an empty store (nothing to cut) or data from before controller mode,
            # which the master's history cannot vouch for; keep what the master also has.
            consistent = min(store.get_max_phy_offset(), their.max_offset)
        cut = store.truncate_files(consistent)
        self.epochs.replace(their.epoch_list)
        ha_port = yield self._master_ha_port(master_addr)
        host, _ = split_addr(master_addr)
        self.master_id, self.master_addr, self.master_ha_addr = master_id, master_addr, f"{host}:{ha_port}"
        self.master_epoch = epoch
        self._mark_known()
        log.info(
            "broker {name} ({id}) follows master {master} ({mid}) of epoch {epoch} from commitlog offset {offset}"
            " ({cut} bytes truncated)",
            name=broker.config.brokerName,
            id=self.broker_id,
            master=master_addr,
            mid=master_id,
            epoch=epoch,
            offset=consistent,
            cut=cut,
        )
        if broker.ha_client is not None:
            broker.ha_client.broker_id = self.broker_id
            broker.ha_client.start()

    def _mark_known(self) -> None:
        self.role_known = True
        if not self._ready.called:
            self._ready.callback(None)

    @defer.inlineCallbacks
    def _master_epochs(self, master_addr: str) -> Any:
        resp = yield self.client.invoke(
            master_addr, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), _TIMEOUT
        )
        _expect(resp, f"epoch cache of {master_addr}")
        return EpochEntryCache.from_json(fastjson.loads(resp.body or b"{}"))

    @defer.inlineCallbacks
    def _master_ha_port(self, master_addr: str) -> Any:
        resp = yield self.client.invoke(master_addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), _TIMEOUT)
        _expect(resp, f"config of {master_addr}")
        props = parse_properties((resp.body or b"").decode("utf-8"))
        return int(props["haListenPort"])

    def get_broker_epoch_cache(self, _channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE: this broker's epoch history up to its commitlog's end."""
        cfg = self.broker.config
        max_offset = self.broker.store.get_max_phy_offset()
        body = EpochEntryCache(
            cluster_name=cfg.brokerClusterName,
            broker_name=cfg.brokerName,
            broker_id=self.broker_id if self.broker_id is not None else cfg.brokerId,
            epoch_list=self.epochs.entries(max_offset),
            max_offset=max_offset,
        )
        return request.response(body=fastjson.dumps(body))

    # -- the master's SyncStateSet

    def _slave_reported(self, broker_id: int, offset: int) -> None:
        """A slave caught up: it joins the SyncStateSet if it holds everything since this epoch began."""
        if broker_id in self.sync_state_set or self.broker.config.is_slave or self._altering:
            return
        if offset >= self.epochs.last_start_offset:
            self._alter_sync_state_set(self.sync_state_set | {broker_id})

    def _acknowledged_offset(self) -> int:
        """How far the replicas a SYNC_MASTER send waits for hold the commitlog (CommitLog.handleHA)."""
        cfg = self.broker.config
        ha = self.broker.ha_service
        assert ha is not None
        acks = {
            c.decoder.slave_broker_id: c.slave_ack_offset
            for c in ha.connections
            if c.decoder.slave_broker_id is not None
        }
        everything = self.broker.store.get_max_phy_offset()
        if cfg.allAckInSyncStateSet:
            members = self.sync_state_set - {self.broker_id}
            return min((acks.get(m, -1) for m in members), default=everything)
        need = cfg.inSyncReplicas - 1  # the master is one of them
        if need <= 0:
            return everything
        ranked = sorted(acks.values(), reverse=True)
        return ranked[need - 1] if len(ranked) >= need else -1

    def put_refused(self) -> tuple[int, str] | None:
        """A controller-mode SYNC_MASTER with too small a SyncStateSet takes no sends (IN_SYNC_REPLICAS_NOT_ENOUGH)."""
        cfg = self.broker.config
        if not cfg.is_sync_master:
            return None
        in_sync = len(self.sync_state_set)
        if in_sync < cfg.minInSyncReplicas or (not cfg.allAckInSyncStateSet and cfg.inSyncReplicas > in_sync):
            return ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"
        return None

    def _check_sync_state_set(self) -> None:
        """Shrink: a slave that has not caught up for haMaxTimeSlaveNotCatchup ms (or is gone) leaves."""
        broker = self.broker
        ha = broker.ha_service
        if broker.config.is_slave or ha is None or not self.role_known:
            return
        now = broker.reactor.seconds()
        limit = broker.config.haMaxTimeSlaveNotCatchup / 1000
        connected = {c.decoder.slave_broker_id for c in ha.connections}
        keep = {
            b
            for b in self.sync_state_set
            if b == self.broker_id or (b in connected and now - ha.caught_up_at.get(b, float("-inf")) <= limit)
        }
        if keep != self.sync_state_set and not self._altering:
            self._alter_sync_state_set(keep)

    def _alter_sync_state_set(self, new: set[int]) -> None:
        header = AlterSyncStateSetRequestHeader(self.broker.config.brokerName, self.broker_id, self.master_epoch)
        body = fastjson.dumps(SyncStateSet(new, self.sync_state_set_epoch))
        epoch = self.master_epoch
        self._altering = True

        def answered(resp: RemotingCommand) -> None:
            self._altering = False
            if resp.code != ResponseCode.SUCCESS:
                log.warn(
                    "controller refused SyncStateSet {new}: {code} {remark}",
                    new=sorted(new),
                    code=resp.code,
                    remark=resp.remark,
                )
                return
            if epoch != self.master_epoch:
                return
            self.sync_state_set = new
            self.sync_state_set_epoch = AlterSyncStateSetResponseHeader.decode(resp.ext_fields).new_sync_state_set_epoch
            if self.broker.ha_service is not None:
                self.broker.ha_service.release_acknowledged()  # fewer members to wait for
            log.info(
                "SyncStateSet of {name} is now {sss} (epoch {epoch})",
                name=self.broker.config.brokerName,
                sss=sorted(new),
                epoch=self.sync_state_set_epoch,
            )

        def failed(f: Any) -> None:
            self._altering = False
            log.warn("altering the SyncStateSet failed: {error}", error=f.getErrorMessage())

        self._call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body).addCallbacks(answered, failed)


def _expect(resp: RemotingCommand, what: str) -> None:
    if resp.code != ResponseCode.SUCCESS:
        raise ControllerUnavailable(f"{what}: code {resp.code}, {resp.remark}")
