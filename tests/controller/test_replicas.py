"""The controller's state machine (ReplicasInfoManager): ids, registration, elections, SyncStateSets, fencing."""

from __future__ import annotations

from gateway.controller.replicas import ReplicasInfoManager, Result
from gateway.remoting.codes import ResponseCode

NAME = "broker-a"


def commit(m: ReplicasInfoManager, result: Result) -> Result:
    for event in result.events:
        m.apply(event)
    return result


def group_of_three(m: ReplicasInfoManager) -> None:
    for broker_id in (1, 2, 3):
        assert m.check_get_next_broker_id("c", NAME).header["nextBrokerId"] == broker_id
        r = commit(m, m.check_apply_broker_id("c", NAME, broker_id, f"10.0.0.{broker_id}:10911;1"))
        assert r.code == ResponseCode.SUCCESS


def everyone_alive(_name: str, _broker_id: int) -> bool:
    return True


def no_info(_name: str, _broker_id: int) -> None:
    return None


def test_broker_ids_are_handed_out_in_order_and_checked() -> None:
    m = ReplicasInfoManager()
    assert m.check_apply_broker_id("c", NAME, 2, "x:1;1").code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    group_of_three(m)
    # The same broker asking again gets its id back; another one does not.
    assert m.check_apply_broker_id("c", NAME, 2, "10.0.0.2:10911;1").code == ResponseCode.SUCCESS
    assert m.check_apply_broker_id("c", NAME, 2, "10.9.9.9:10911;7").code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert m.check_apply_broker_id("c", NAME, 7, "y:1;1").code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert m.check_register_broker("c", NAME, 9, "z:1").code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    # A broker that moved registers its new address.
    r = commit(m, m.check_register_broker("c", NAME, 3, "10.0.0.33:10911"))
    assert r.code == ResponseCode.SUCCESS and m.groups[NAME].address(3) == "10.0.0.33:10911"
    assert r.header["masterBrokerId"] is None and r.header["masterEpoch"] == 0


def test_first_election_takes_the_asking_broker_then_the_sync_state_set_decides() -> None:
    m = ReplicasInfoManager()
    group_of_three(m)
    r = commit(m, m.check_elect_master(NAME, 2, False, everyone_alive, no_info, False))
    assert r.code == ResponseCode.SUCCESS
    assert (r.header["masterBrokerId"], r.header["masterEpoch"], r.header["syncStateSetEpoch"]) == (2, 1, 1)
    g = m.groups[NAME]
    assert (g.master_broker_id, g.master_epoch, g.sync_state_set) == (2, 1, {2})
    # The master alive: nobody else is elected.
    r = m.check_elect_master(NAME, 3, False, everyone_alive, no_info, False)
    assert r.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST and r.header["masterBrokerId"] == 2
    # SyncStateSet {2, 1}: when 2 dies, 1 is elected (3 never caught up), epoch 2.
    commit(m, m.check_alter_sync_state_set(NAME, 2, 1, {1, 2}, 1, everyone_alive))
    assert g.sync_state_set == {1, 2} and g.sync_state_set_epoch == 2

    def alive(_name: str, broker_id: int) -> bool:
        return broker_id != 2

    r = commit(m, m.check_elect_master(NAME, None, False, alive, no_info, False))
    assert r.code == ResponseCode.SUCCESS and r.header["masterBrokerId"] == 1
    assert (g.master_broker_id, g.master_epoch, g.sync_state_set, g.sync_state_set_epoch) == (1, 2, {1}, 3)
    # 1 dies too: nobody in the SyncStateSet is left. The controller records that there is no master...
    r = commit(m, m.check_elect_master(NAME, None, False, lambda _n, b: b == 3, no_info, False))
    assert r.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE and g.master_broker_id is None
    assert (g.master_epoch, g.sync_state_set, g.sync_state_set_epoch) == (3, {1}, 3)  # the set stays
    # ...and only an unclean election makes 3 master.
    r = commit(m, m.check_elect_master(NAME, 3, False, lambda _n, b: b == 3, no_info, True))
    assert r.code == ResponseCode.SUCCESS and g.master_broker_id == 3 and g.master_epoch == 4


def test_election_prefers_higher_epoch_then_offset_then_priority() -> None:
    m = ReplicasInfoManager()
    group_of_three(m)
    commit(m, m.check_elect_master(NAME, 1, False, everyone_alive, no_info, False))
    commit(m, m.check_alter_sync_state_set(NAME, 1, 1, {1, 2, 3}, 1, everyone_alive))
    info = {2: (1, 500, 5), 3: (1, 900, 9)}
    r = m.check_elect_master(NAME, None, False, lambda _n, b: b != 1, lambda _n, b: info.get(b), False)
    assert r.header["masterBrokerId"] == 3  # same epoch, more data
    info[2] = (1, 900, 1)
    r = m.check_elect_master(NAME, None, False, lambda _n, b: b != 1, lambda _n, b: info.get(b), False)
    assert r.header["masterBrokerId"] == 2  # same data, better priority
    # designateElect: that broker, if it is in the SyncStateSet.
    r = m.check_elect_master(NAME, 3, True, lambda _n, b: b != 1, lambda _n, b: info.get(b), False)
    assert r.header["masterBrokerId"] == 3


def test_alter_sync_state_set_is_fenced() -> None:
    m = ReplicasInfoManager()
    group_of_three(m)
    commit(m, m.check_elect_master(NAME, 1, False, everyone_alive, no_info, False))
    codes = [
        m.check_alter_sync_state_set(NAME, 2, 1, {1, 2}, 1, everyone_alive).code,  # not the master
        m.check_alter_sync_state_set(NAME, 1, 0, {1, 2}, 1, everyone_alive).code,  # old master epoch
        m.check_alter_sync_state_set(NAME, 1, 1, {1, 2}, 0, everyone_alive).code,  # old set epoch
        m.check_alter_sync_state_set(NAME, 1, 1, {1, 9}, 1, everyone_alive).code,  # unknown replica
        m.check_alter_sync_state_set(NAME, 1, 1, {1, 2}, 1, lambda _n, b: b == 1).code,  # dead replica
        m.check_alter_sync_state_set(NAME, 1, 1, {2, 3}, 1, everyone_alive).code,  # without the master
    ]
    assert codes == [
        ResponseCode.CONTROLLER_INVALID_MASTER,
        ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
        ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
        ResponseCode.CONTROLLER_INVALID_REPLICAS,
        ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
        ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
    ]
    r = commit(m, m.check_alter_sync_state_set(NAME, 1, 1, {1, 3}, 1, everyone_alive))
    assert r.header == {"newSyncStateSetEpoch": 2} and m.groups[NAME].sync_state_set == {1, 3}


def test_clean_broker_data() -> None:
    m = ReplicasInfoManager()
    group_of_three(m)
    commit(m, m.check_elect_master(NAME, 1, False, everyone_alive, no_info, False))
    commit(m, m.check_clean_broker_data(NAME, [1]))
    g = m.groups[NAME]
    assert set(g.brokers) == {2, 3} and g.master_broker_id is None
    commit(m, m.check_clean_broker_data(NAME, None))
    assert NAME not in m.groups
    assert m.check_clean_broker_data(NAME, None).code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
