"""Headers and bodies of RocketMQ 5's controller requests (``protocol.header.controller`` and friends).

Brokers in controller mode (``enableControllerMode``) and the controller speak these; field names are
Apache 5.x's so that its brokers, controllers and mqadmin read them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .bodies import _int32, _int64, _list, _map, _str, _text, _whole
from .headers import CommandHeader, wire

# ---------------------------------------------------------------------------- registration


@dataclass(slots=True)
class GetNextBrokerIdRequestHeader(CommandHeader):
    cluster_name: str = wire("clusterName", required=True)
    broker_name: str = wire("brokerName", required=True)


@dataclass(slots=True)
class GetNextBrokerIdResponseHeader(CommandHeader):
    cluster_name: str | None = wire("clusterName")
    broker_name: str | None = wire("brokerName")
    next_broker_id: int | None = wire("nextBrokerId", int)


@dataclass(slots=True)
class ApplyBrokerIdRequestHeader(CommandHeader):
    cluster_name: str = wire("clusterName", required=True)
    broker_name: str = wire("brokerName", required=True)
    applied_broker_id: int = wire("appliedBrokerId", int, required=True)
    # "<broker address>;<timestamp>": a broker re-applying with the same code gets its id back.
    register_check_code: str = wire("registerCheckCode", required=True)


@dataclass(slots=True)
class ApplyBrokerIdResponseHeader(CommandHeader):
    cluster_name: str | None = wire("clusterName")
    broker_name: str | None = wire("brokerName")


@dataclass(slots=True)
class RegisterBrokerToControllerRequestHeader(CommandHeader):
    cluster_name: str = wire("clusterName", required=True)
    broker_name: str = wire("brokerName", required=True)
    broker_id: int = wire("brokerId", int, required=True)
    broker_address: str = wire("brokerAddress", required=True)


@dataclass(slots=True)
class RegisterBrokerToControllerResponseHeader(CommandHeader):
    cluster_name: str | None = wire("clusterName")
    broker_name: str | None = wire("brokerName")
    master_broker_id: int | None = wire("masterBrokerId", int)
    master_address: str | None = wire("masterAddress")
    master_epoch: int | None = wire("masterEpoch", int)
    sync_state_set_epoch: int | None = wire("syncStateSetEpoch", int)


# ---------------------------------------------------------------------------- heartbeats and replica state


@dataclass(slots=True)
class BrokerHeartbeatRequestHeader(CommandHeader):
    """BROKER_HEARTBEAT (904): a broker in controller mode tells the controller it lives, and how far it is."""

    cluster_name: str = wire("clusterName", required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    broker_name: str = wire("brokerName", required=True)
    broker_id: int | None = wire("brokerId", int)
    epoch: int | None = wire("epoch", int)
    max_offset: int | None = wire("maxOffset", int)
    confirm_offset: int | None = wire("confirmOffset", int)
    heartbeat_timeout_mills: int | None = wire("heartbeatTimeoutMills", int)
    election_priority: int | None = wire("electionPriority", int)


@dataclass(slots=True)
class GetReplicaInfoRequestHeader(CommandHeader):
    broker_name: str = wire("brokerName", required=True)


@dataclass(slots=True)
class GetReplicaInfoResponseHeader(CommandHeader):
    master_broker_id: int | None = wire("masterBrokerId", int)
    master_address: str | None = wire("masterAddress")
    master_epoch: int | None = wire("masterEpoch", int)


@dataclass(slots=True)
class ElectMasterRequestHeader(CommandHeader):
    cluster_name: str = wire("clusterName", default="")
    broker_name: str = wire("brokerName", required=True)
    broker_id: int | None = wire("brokerId", int)
    # mqadmin electMaster: make this broker the master if it is in the SyncStateSet.
    designate_elect: bool = wire("designateElect", bool, default=False)


@dataclass(slots=True)
class ElectMasterResponseHeader(CommandHeader):
    master_broker_id: int | None = wire("masterBrokerId", int)
    master_address: str | None = wire("masterAddress")
    master_epoch: int | None = wire("masterEpoch", int)
    sync_state_set_epoch: int | None = wire("syncStateSetEpoch", int)


@dataclass(slots=True)
class AlterSyncStateSetRequestHeader(CommandHeader):
    broker_name: str = wire("brokerName", required=True)
    master_broker_id: int = wire("masterBrokerId", int, required=True)
    master_epoch: int = wire("masterEpoch", int, required=True)


@dataclass(slots=True)
class AlterSyncStateSetResponseHeader(CommandHeader):
    new_sync_state_set_epoch: int = wire("newSyncStateSetEpoch", int, default=0)


@dataclass(slots=True)
class NotifyBrokerRoleChangedRequestHeader(CommandHeader):
    """NOTIFY_BROKER_ROLE_CHANGED (1008): the controller tells a broker of its group's new master."""

    master_address: str | None = wire("masterAddress")
    master_epoch: int | None = wire("masterEpoch", int)
    sync_state_set_epoch: int | None = wire("syncStateSetEpoch", int)
    master_broker_id: int | None = wire("masterBrokerId", int)


@dataclass(slots=True)
class GetMetaDataResponseHeader(CommandHeader):
    group: str | None = wire("group")
    controller_leader_id: str | None = wire("controllerLeaderId")
    controller_leader_address: str | None = wire("controllerLeaderAddress")
    is_leader: bool = wire("isLeader", bool, default=False)
    peers: str | None = wire("peers")


@dataclass(slots=True)
class CleanControllerBrokerDataRequestHeader(CommandHeader):
    cluster_name: str = wire("clusterName", default="")
    broker_name: str = wire("brokerName", required=True)
    # ';'-separated broker ids; none: the whole broker group.
    broker_controller_ids_to_clean: str | None = wire("brokerControllerIdsToClean")
    is_clean_living_broker: bool = wire("isCleanLivingBroker", bool, default=False)


# ---------------------------------------------------------------------------- bodies


@dataclass(slots=True)
class SyncStateSet:
    """The brokers of a group holding everything the master acknowledged, and that set's epoch."""

    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch}

    @classmethod
    def from_json(cls, obj: Any) -> SyncStateSet:
        obj = _map(obj)
        ids = _list(obj.get("syncStateSet") or [], "syncStateSet")
        return cls(
            sync_state_set={_whole(i, "syncStateSet", "long") for i in ids},
            sync_state_set_epoch=_int32(obj, "syncStateSetEpoch"),
        )


@dataclass(slots=True)
class BrokerMemberGroup:
    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
        }

    @classmethod
    def from_json(cls, obj: Any) -> BrokerMemberGroup:
        obj = _map(obj)
        addrs = _map(obj.get("brokerAddrs") or {}, "brokerAddrs")
        return cls(
            cluster=_str(obj, "cluster"),
            broker_name=_str(obj, "brokerName"),
            broker_addrs={_whole(k, "brokerAddrs", "long"): _text(v, "brokerAddrs") for k, v in addrs.items()},
        )


@dataclass(slots=True)
class ElectMasterResponseBody:
    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: set[int] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"syncStateSet": sorted(self.sync_state_set)}
        if self.broker_member_group is not None:
            out["brokerMemberGroup"] = self.broker_member_group.to_json()
        return out

    @classmethod
    def from_json(cls, obj: Any) -> ElectMasterResponseBody:
        obj = _map(obj)
        group = obj.get("brokerMemberGroup")
        return cls(
            broker_member_group=BrokerMemberGroup.from_json(group) if group is not None else None,
            sync_state_set={_whole(i, "syncStateSet", "long") for i in _list(obj.get("syncStateSet") or [], "")},
        )


@dataclass(slots=True)
class EpochEntry:
    """From ``start_offset`` on, the commitlog was written by the master of ``epoch`` (up to ``end_offset``)."""

    epoch: int
    start_offset: int
    end_offset: int = (1 << 63) - 1  # Long.MAX_VALUE: the current epoch has no end yet

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "endOffset": self.end_offset}

    @classmethod
    def from_json(cls, obj: Any) -> EpochEntry:
        obj = _map(obj)
        return cls(
            epoch=_int32(obj, "epoch"),
            start_offset=_int64(obj, "startOffset"),
            end_offset=_int64(obj, "endOffset", (1 << 63) - 1),
        )


@dataclass(slots=True)
class EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE (1007)'s body: a broker's epoch history and its commitlog's max offset."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    epoch_list: list[EpochEntry] = field(default_factory=list)
    max_offset: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "epochList": [e.to_json() for e in self.epoch_list],
            "maxOffset": self.max_offset,
        }

    @classmethod
    def from_json(cls, obj: Any) -> EpochEntryCache:
        obj = _map(obj)
        return cls(
            cluster_name=_str(obj, "clusterName"),
            broker_name=_str(obj, "brokerName"),
            broker_id=_int64(obj, "brokerId"),
            epoch_list=[EpochEntry.from_json(e) for e in _list(obj.get("epochList") or [], "epochList")],
            max_offset=_int64(obj, "maxOffset"),
        )
