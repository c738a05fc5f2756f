"""ControllerRequestProcessor: the controller requests brokers and mqadmin send (RocketMQ 5 codes 904, 1001-1013).

Every request that changes state is checked against the state machine and its events committed through Raft
before the answer goes out; requests are taken one at a time (Apache's single event-scheduler thread), so a
check always sees the events of the requests before it. Only the Raft leader answers; the others say
CONTROLLER_NOT_LEADER (GET_METADATA_INFO excepted; a heartbeat is recorded by every controller, as in Apache,
and answered CONTROLLER_NOT_LEADER by followers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger

from gateway.config import ConfigError, UpdateRefused, config_properties, properties_to_string
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.controller_protocol import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from gateway.remoting.headers import ext_value

from .config import update_controller_config
from .raft import NotLeader
from .replicas import Result

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from .service import ControllerManager

log = Logger()


class ControllerRequestProcessor:
    """Answers controller requests for one :class:`~gateway.controller.service.ControllerManager`."""

    def __init__(self, manager: ControllerManager) -> None:
        self.manager = manager
        self._lock = defer.DeferredLock()

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.get_metadata_info,
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.get_next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            RequestCode.CLEAN_BROKER_DATA: self.clean_broker_data,
            RequestCode.GET_CONTROLLER_CONFIG: self.get_controller_config,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self.update_controller_config,
        }

    # -- plumbing

    def run(self, request: RemotingCommand, check: Any) -> defer.Deferred[RemotingCommand]:
        """Check, commit the events, answer: one request at a time, on the leader only."""
        raft = self.manager.raft

        @defer.inlineCallbacks
        def step() -> Any:
            if not raft.is_leader:
                return _not_leader(request)
            result: Result = check()
            try:
                yield raft.commit(result.events)
            except NotLeader:
                return _not_leader(request)
            except Exception as e:
                return request.response(ResponseCode.SYSTEM_ERROR, f"controller could not commit: {e}")
            if result.events:
                log.info("controller committed {events}", events=result.events)
            return _answer(request, result)

        return self._lock.run(step)

    # -- requests

    def broker_heartbeat(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.decode(request.ext_fields)
        if h.broker_id is None:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        self.manager.heartbeats.heartbeat(
            h.cluster_name,
            h.broker_name,
            h.broker_id,
            h.broker_addr,
            h.heartbeat_timeout_mills,
            h.epoch,
            h.max_offset,
            h.election_priority,
            channel,
        )
        # Apache's brokers send heartbeats oneway; ours switch to the leader when a follower says it is not.
        return request.response(ResponseCode.SUCCESS) if self.manager.raft.is_leader else _not_leader(request)

    def get_metadata_info(self, _channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        raft = self.manager.raft
        cfg = self.manager.config
        leader = raft.leader
        leader_id = next((i for i, a in cfg.peers.items() if a == leader), None)
        header = GetMetaDataResponseHeader(
            group=cfg.controllerDLegerGroup,
            controller_leader_id=leader_id,
            controller_leader_address=leader,
            is_leader=raft.is_leader,
            peers=";".join(f"{i}:{a}" for i, a in cfg.peers.items()),
        )
        return request.response(ResponseCode.SUCCESS, ext_fields=header.encode())

    def get_next_broker_id(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = GetNextBrokerIdRequestHeader.decode(request.ext_fields)
        return self.run(request, lambda: self.manager.replicas.check_get_next_broker_id(h.cluster_name, h.broker_name))

    def apply_broker_id(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = ApplyBrokerIdRequestHeader.decode(request.ext_fields)
        return self.run(
            request,
            lambda: self.manager.replicas.check_apply_broker_id(
                h.cluster_name, h.broker_name, h.applied_broker_id, h.register_check_code
            ),
        )

    def register_broker(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = RegisterBrokerToControllerRequestHeader.decode(request.ext_fields)
        return self.run(
            request,
            lambda: self.manager.replicas.check_register_broker(
                h.cluster_name, h.broker_name, h.broker_id, h.broker_address
            ),
        )

    def elect_master(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = ElectMasterRequestHeader.decode(request.ext_fields)
        d = self.run(request, lambda: self.manager.check_elect(h.broker_name, h.broker_id, h.designate_elect))

        def maybe_notify(resp: RemotingCommand) -> RemotingCommand:
            if resp.code == ResponseCode.SUCCESS:
                self.manager.notify_role_changed(h.broker_name)
            return resp

        return d.addCallback(maybe_notify)

    def alter_sync_state_set(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = AlterSyncStateSetRequestHeader.decode(request.ext_fields)
        body = SyncStateSet.from_json(fastjson.loads(request.body or b"{}"))
        return self.run(
            request,
            lambda: self.manager.replicas.check_alter_sync_state_set(
                h.broker_name,
                h.master_broker_id,
                h.master_epoch,
                body.sync_state_set,
                body.sync_state_set_epoch,
                self.manager.heartbeats.is_alive,
            ),
        )

    def get_replica_info(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = GetReplicaInfoRequestHeader.decode(request.ext_fields)
        return self.run(request, lambda: self.manager.replicas.check_get_replica_info(h.broker_name))

    def get_sync_state_data(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """mqadmin getSyncStateSet: BrokerReplicasInfo of the broker sets named in the body (a JSON list)."""
        names = fastjson.loads(request.body or b"[]")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST, "body must be a list of broker names")
        return self.run(request, lambda: Result(body=self.manager.replicas_info(names)))

    def clean_broker_data(self, _channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = CleanControllerBrokerDataRequestHeader.decode(request.ext_fields)
        raw = h.broker_controller_ids_to_clean
        try:
            ids = [int(i) for i in raw.split(";") if i.strip()] if raw else None
        except ValueError:
            return request.response(ResponseCode.CONTROLLER_INVALID_REQUEST, f"bad broker ids {raw!r}")

        def check() -> Result:
            heartbeats = self.manager.heartbeats
            group = self.manager.replicas.groups.get(h.broker_name)
            targets = ids if ids is not None else (list(group.brokers) if group is not None else [])
            if not h.is_clean_living_broker and any(heartbeats.is_alive(h.broker_name, i) for i in targets):
                return Result(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"some broker of {h.broker_name} is still alive; set isCleanLivingBroker to clean it",
                )
            return self.manager.replicas.check_clean_broker_data(h.broker_name, ids)

        return self.run(request, check)

    def get_controller_config(self, _channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """GET_CONTROLLER_CONFIG (mqadmin getControllerConfig): every setting as ``key=value`` lines."""
        return request.response(body=properties_to_string(config_properties(self.manager.config)).encode())

    def update_controller_config(self, _channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_CONTROLLER_CONFIG: as UPDATE_NAMESRV_CONFIG (black list NO_PERMISSION, unknown keys
        INVALID_PARAMETER, all or nothing). Apache refuses only configStorePath; we refuse paths and the Raft
        group too. This controller only: each controller has its own file, as in Apache."""
        if request.body:
            try:
                update_controller_config(self.manager.config, request.body)
            except UpdateRefused as e:
                return request.response(e.code, e.remark)
            except (OSError, ConfigError) as e:
                log.error("persist controller config failed: {error}", error=e)
                return request.response(ResponseCode.SYSTEM_ERROR, "config updated but not persisted")
        return request.response()


def _not_leader(request: RemotingCommand) -> RemotingCommand:
    return request.response(ResponseCode.CONTROLLER_NOT_LEADER, "The controller is not in leader state")


def _answer(request: RemotingCommand, result: Result) -> RemotingCommand:
    ext = {k: ext_value(v) for k, v in result.header.items() if v is not None}
    body = fastjson.dumps(result.body) if result.body is not None else b""
    return request.response(result.code, result.remark, ext, body)
