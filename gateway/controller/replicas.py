"""The controller's replicated state: broker groups, their ids, masters, epochs and SyncStateSets.

Apache 5's ReplicasInfoManager as a pure state machine. A request is first *checked* against the current
state (``check_*``: an answer now, and the events to commit); only committed events change the state
(``apply``), the same way on every controller, in Raft's order. Nothing here does I/O or reads a clock:
whether a broker is alive is asked of the ``alive`` function the caller passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.remoting.codes import ResponseCode

FIRST_BROKER_CONTROLLER_ID = 1  # MixAll.FIRST_BROKER_CONTROLLER_ID


@dataclass(slots=True)
class BrokerGroup:
    """One broker set (brokerName): BrokerReplicaInfo and SyncStateInfo together."""

    cluster_name: str
    broker_name: str
    # broker id → (address, registerCheckCode)
    brokers: dict[int, tuple[str, str]] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    @property
    def next_broker_id(self) -> int:
        return max(self.brokers, default=FIRST_BROKER_CONTROLLER_ID - 1) + 1

    @property
    def first_time_for_elect(self) -> bool:
        return self.master_epoch == 0

    def address(self, broker_id: int | None) -> str | None:
        entry = self.brokers.get(broker_id) if broker_id is not None else None
        return entry[0] if entry is not None else None


@dataclass(slots=True)
class Result:
    """A checked request: its answer (code, remark, header fields, body) and the events to commit first."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)


# The live facts the election compares (BrokerLiveInfo): (epoch, maxOffset, electionPriority).
LiveInfo = Callable[[str, int], tuple[int, int, int] | None]


class ReplicasInfoManager:
    """Every broker group the controller knows; ``check_*`` answer requests, ``apply`` commits events."""

    def __init__(self) -> None:
        self.groups: dict[str, BrokerGroup] = {}

    # -- events (committed through Raft, applied everywhere)

    def apply(self, event: dict[str, Any]) -> None:
        """Apply one committed event: a dict with ``type`` and its fields (plain data, as Raft ships it)."""
        kind = event["type"]
        name = event["brokerName"]
        group = self.groups.get(name)
        if kind == "ApplyBrokerId":
            if group is None:
                group = self.groups[name] = BrokerGroup(event["clusterName"], name)
            group.brokers[event["brokerId"]] = (event["brokerAddress"], event["registerCheckCode"])
        elif group is None:
            return
        elif kind == "UpdateBrokerAddress":
            _, code = group.brokers.get(event["brokerId"], ("", ""))
            group.brokers[event["brokerId"]] = (event["brokerAddress"], code)
        elif kind == "ElectMaster":
            new_master = event.get("newMasterBrokerId")
            group.master_broker_id = new_master
            group.master_epoch += 1
            if new_master is not None:
                group.sync_state_set = {new_master}
                group.sync_state_set_epoch += 1
            # else: the master is gone and nobody could take over; the SyncStateSet stays, so that one of its
            # members may still be elected when it comes back.
        elif kind == "AlterSyncStateSet":
            group.sync_state_set = set(event["syncStateSet"])
            group.sync_state_set_epoch += 1
        elif kind == "CleanBrokerData":
            ids = event.get("brokerIds")
            if not ids:
                del self.groups[name]
            else:
                for broker_id in ids:
                    group.brokers.pop(broker_id, None)
                    group.sync_state_set.discard(broker_id)
                if group.master_broker_id in ids:
                    group.master_broker_id = None
                if not group.brokers:
                    del self.groups[name]

    # -- requests

    def check_get_next_broker_id(self, cluster: str, broker_name: str) -> Result:
        group = self.groups.get(broker_name)
        next_id = group.next_broker_id if group is not None else FIRST_BROKER_CONTROLLER_ID
        return Result(header={"clusterName": cluster, "brokerName": broker_name, "nextBrokerId": next_id})

    def check_apply_broker_id(self, cluster: str, broker_name: str, broker_id: int, check_code: str) -> Result:
        header = {"clusterName": cluster, "brokerName": broker_name}
        group = self.groups.get(broker_name)
        event = {
            "type": "ApplyBrokerId",
            "clusterName": cluster,
            "brokerName": broker_name,
            "brokerId": broker_id,
            "brokerAddress": check_code.partition(";")[0],
            "registerCheckCode": check_code,
        }
        if group is None:
            if broker_id != FIRST_BROKER_CONTROLLER_ID:
                return _refused(
                    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"Broker-set: {broker_name} hasn't been registered in controller, but broker try to apply brokerId:"
                    f" {broker_id}",
                )
            return Result(header=header, events=[event])
        if broker_id in group.brokers:
            if group.brokers[broker_id][1] == check_code:
                return Result(header=header)  # the same broker asking again
            return _refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}: it is taken",
            )
        if broker_id != group.next_broker_id:
            return _refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}:"
                f" the next id is {group.next_broker_id}",
            )
        return Result(header=header, events=[event])

    def check_register_broker(self, cluster: str, broker_name: str, broker_id: int, address: str) -> Result:
        group = self.groups.get(broker_name)
        if group is None or broker_id not in group.brokers:
            return _refused(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"BrokerId: {broker_id} in broker-set: {broker_name} has not been applied",
            )
        result = Result(
            header={
                "clusterName": cluster,
                "brokerName": broker_name,
                "masterBrokerId": group.master_broker_id,
                "masterAddress": group.address(group.master_broker_id),
                "masterEpoch": group.master_epoch,
                "syncStateSetEpoch": group.sync_state_set_epoch,
            },
            body={"syncStateSet": sorted(group.sync_state_set), "syncStateSetEpoch": group.sync_state_set_epoch},
        )
        if group.brokers[broker_id][0] != address:
            result.events.append(
                {
                    "type": "UpdateBrokerAddress",
                    "brokerName": broker_name,
                    "brokerId": broker_id,
                    "brokerAddress": address,
                }
            )
            if broker_id == group.master_broker_id:
                result.header["masterAddress"] = address
        return result

    def check_elect_master(
        self,
        broker_name: str,
        broker_id: int | None,
        designate: bool,
        alive: Callable[[str, int], bool],
        live_info: LiveInfo,
        unclean: bool,
    ) -> Result:
        """ELECT_MASTER: by a broker (``broker_id``) or by the controller itself (None) when a master died."""
        group = self.groups.get(broker_name)
        if group is None:
            return _refused(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
        old_master = group.master_broker_id
        new_master = broker_id if group.first_time_for_elect and broker_id is not None else None
        if new_master is None:
            new_master = elect(
                broker_name,
                group.sync_state_set,
                set(group.brokers) if unclean else None,
                old_master,
                broker_id if designate else None,
                alive,
                live_info,
            )
        if new_master is not None and new_master == old_master:
            return Result(
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                f"The old master {old_master} is still alive, not need to elect new master for broker {broker_name}",
                header=self._master_header(group),
                body={"syncStateSet": sorted(group.sync_state_set)},
            )
        if new_master is not None:
            members = {i: a for i, (a, _) in sorted(group.brokers.items())}
            return Result(
                header={
                    "masterBrokerId": new_master,
                    "masterAddress": group.address(new_master),
                    "masterEpoch": group.master_epoch + 1,
                    "syncStateSetEpoch": group.sync_state_set_epoch + 1,
                },
                body={
                    "brokerMemberGroup": {
                        "cluster": group.cluster_name,
                        "brokerName": broker_name,
                        "brokerAddrs": members,
                    },
                    "syncStateSet": [new_master],
                },
                events=[{"type": "ElectMaster", "brokerName": broker_name, "newMasterBrokerId": new_master}],
            )
        if broker_id is None:
            # Triggered by the controller: the master is gone and nobody can take over; say so in the state.
            return Result(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                "Old master has down and failed to elect a new broker master",
                events=[{"type": "ElectMaster", "brokerName": broker_name, "newMasterBrokerId": None}],
            )
        return _refused(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def check_alter_sync_state_set(
        self,
        broker_name: str,
        master_id: int,
        master_epoch: int,
        new_set: set[int],
        new_set_epoch: int,
        alive: Callable[[str, int], bool],
    ) -> Result:
        group = self.groups.get(broker_name)
        if group is None:
            return _refused(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"broker-set {broker_name} unknown")
        if group.master_broker_id != master_id:
            return _refused(
                ResponseCode.CONTROLLER_INVALID_MASTER,
                f"Rejecting alter syncStateSet request because the current master is:{group.master_broker_id},"
                f" not {master_id}",
            )
        if group.master_epoch != master_epoch:
            return _refused(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"Rejecting alter syncStateSet request because the current master epoch is:{group.master_epoch},"
                f" not {master_epoch}",
            )
        if group.sync_state_set_epoch != new_set_epoch:
            return _refused(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                f"{group.sync_state_set_epoch}, not {new_set_epoch}",
            )
        for replica in new_set:
            if replica not in group.brokers:
                return _refused(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS,
                    f"Rejecting alter syncStateSet request because the replicas {replica} don't exist",
                )
            if not alive(broker_name, replica):
                return _refused(
                    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                    f"Rejecting alter syncStateSet request because the replicas {replica} don't alive",
                )
        if master_id not in new_set:
            return _refused(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin leader"
                f":{master_id}",
            )
        return Result(
            header={"newSyncStateSetEpoch": group.sync_state_set_epoch + 1},
            events=[{"type": "AlterSyncStateSet", "brokerName": broker_name, "syncStateSet": sorted(new_set)}],
        )

    def check_get_replica_info(self, broker_name: str) -> Result:
        group = self.groups.get(broker_name)
        if group is None:
            return _refused(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker-set {broker_name} unknown")
        header = self._master_header(group)
        del header["syncStateSetEpoch"]
        return Result(
            header=header,
            body={"syncStateSet": sorted(group.sync_state_set), "syncStateSetEpoch": group.sync_state_set_epoch},
        )

    def check_clean_broker_data(self, broker_name: str, broker_ids: list[int] | None) -> Result:
        if broker_name not in self.groups:
            return _refused(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"Broker-set {broker_name} is not registered"
            )
        return Result(events=[{"type": "CleanBrokerData", "brokerName": broker_name, "brokerIds": broker_ids}])

    @staticmethod
    def _master_header(group: BrokerGroup) -> dict[str, Any]:
        return {
            "masterBrokerId": group.master_broker_id,
            "masterAddress": group.address(group.master_broker_id),
            "masterEpoch": group.master_epoch,
            "syncStateSetEpoch": group.sync_state_set_epoch,
        }


def elect(
    broker_name: str,
    sync_state_set: set[int],
    all_replicas: set[int] | None,
    old_master: int | None,
    prefer: int | None,
    alive: Callable[[str, int], bool],
    live_info: LiveInfo,
) -> int | None:
    """DefaultElectPolicy: from the alive members of the SyncStateSet (then, unclean, of every replica): the old
    master if still there, else ``prefer`` if given, else the one with the highest epoch, then max offset, then the
    lowest electionPriority."""
    for candidates in (sync_state_set, all_replicas):
        if candidates is None:
            continue
        valid = {b for b in candidates if alive(broker_name, b)}
        if not valid:
            continue
        if old_master in valid and (prefer is None or prefer == old_master):
            return old_master
        if prefer is not None:
            return prefer if prefer in valid else None

        def rank(broker_id: int) -> tuple[int, int, int, int]:
            epoch, max_offset, priority = live_info(broker_name, broker_id) or (-1, -1, 2**31 - 1)
            return (-epoch, -max_offset, priority, broker_id)

        return min(valid, key=rank)
    return None


def _refused(code: int, remark: str) -> Result:
    return Result(code, remark)
