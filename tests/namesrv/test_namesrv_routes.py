"""RouteInfoManager rules, without sockets: registration, slaves, increments, expiry, admin queries."""

from __future__ import annotations

from gateway.namesrv.routes import RouteInfoManager
from gateway.remoting.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from gateway.remoting.codes import PermName

from .support import CLUSTER, topic_wrapper

MASTER = "10.0.0.5:10911"
SLAVE = "10.0.0.6:10911"


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def register(routes, topics, *, name="broker-a", addr=MASTER, broker_id=0, counter=1, channel=None, cluster=CLUSTER):
    return routes.register_broker(
        cluster, addr, name, broker_id, addr.replace("10911", "10912"), topic_wrapper(topics, counter), [], channel
    )


def test_master_registration_makes_a_route():
    routes = RouteInfoManager()
    result = register(routes, {"TopicTest": 4})
    assert result.master_addr is None and result.ha_server_addr is None
    route = routes.pick_up_topic_route_data("TopicTest")
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, 4, 6)
    ]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        (CLUSTER, "broker-a", {0: MASTER})
    ]
    assert routes.pick_up_topic_route_data("Unknown") is None


def test_slave_gets_master_addresses_and_adds_no_queue_data():
    routes = RouteInfoManager()
    early = register(routes, {"FromSlave": 1}, addr=SLAVE, broker_id=1)
    assert early.master_addr is None  # no master yet
    assert routes.pick_up_topic_route_data("FromSlave") is None

    register(routes, {"TopicTest": 4})
    result = register(routes, {"FromSlave": 1}, addr=SLAVE, broker_id=1, counter=2)
    assert (result.master_addr, result.ha_server_addr) == (MASTER, "10.0.0.5:10912")
    assert routes.pick_up_topic_route_data("FromSlave") is None
    assert routes.pick_up_topic_route_data("TopicTest").broker_datas[0].broker_addrs == {0: MASTER, 1: SLAVE}


def test_slave_switched_to_master_keeps_one_id_per_address():
    routes = RouteInfoManager()
    register(routes, {"TopicTest": 4}, addr=SLAVE, broker_id=1)
    register(routes, {"TopicTest": 4}, addr=SLAVE, broker_id=0)
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}
    assert routes.pick_up_topic_route_data("TopicTest") is not None


def test_incremental_body_keeps_topics_and_same_version_changes_nothing():
    routes = RouteInfoManager()
    register(routes, {"A": 4, "B": 4}, counter=1)
    register(routes, {"C": 2}, counter=2)
    assert set(routes.get_all_topic_list().topic_list) == {"A", "B", "C"}
    # Same DataVersion as the last registration: the body is not looked at.
    register(routes, {"D": 2}, counter=2)
    assert routes.pick_up_topic_route_data("D") is None
    # A changed queue count arrives with a new version.
    register(routes, {"A": 8}, counter=3)
    assert routes.pick_up_topic_route_data("A").queue_datas[0].read_queue_nums == 8


def test_data_version_queries_and_heartbeat():
    clock = FakeClock()
    routes = RouteInfoManager(now=clock)
    register(routes, {"A": 4}, counter=7)
    stored = routes.query_broker_topic_config(MASTER)
    assert stored == DataVersion(timestamp=1_700_000_000_000, counter=7)
    assert not routes.is_broker_topic_config_changed(MASTER, DataVersion(timestamp=1_700_000_000_000, counter=7))
    assert routes.is_broker_topic_config_changed(MASTER, DataVersion(timestamp=1_700_000_000_000, counter=8))
    assert routes.is_broker_topic_config_changed("1.2.3.4:1", stored)
    clock.ms += 60_000
    routes.update_broker_info_update_timestamp(MASTER)
    assert routes.broker_live_table[MASTER].last_update_timestamp == clock.ms


def test_scan_expires_silent_brokers_after_120s():
    clock = FakeClock()
    routes = RouteInfoManager(now=clock)
    channel = object()
    register(routes, {"A": 4}, channel=channel)
    register(routes, {"B": 4}, name="broker-b", addr="10.0.0.7:10911")
    clock.ms += 100_000
    routes.update_broker_info_update_timestamp("10.0.0.7:10911")
    clock.ms += 20_000
    assert routes.scan_not_active_broker() == []  # exactly 120 s: not yet
    clock.ms += 1
    expired = routes.scan_not_active_broker()
    assert [live.channel for live in expired] == [channel]
    assert routes.pick_up_topic_route_data("A") is None
    assert routes.pick_up_topic_route_data("B") is not None
    assert routes.cluster_addr_table == {CLUSTER: {"broker-b"}}
    assert MASTER not in routes.broker_live_table


def test_channel_destroy_removes_the_brokers_registered_through_it():
    routes = RouteInfoManager()
    channel = object()
    register(routes, {"A": 4}, channel=channel)
    register(routes, {"A": 4}, addr=SLAVE, broker_id=1, channel=object())
    routes.on_channel_destroy("10.0.0.5:54321", object())  # some client: nothing happens
    assert routes.pick_up_topic_route_data("A") is not None
    routes.on_channel_destroy("10.0.0.5:54321", channel)
    # The slave still holds the broker name, so the queues stay; the master address is gone.
    route = routes.pick_up_topic_route_data("A")
    assert route.broker_datas[0].broker_addrs == {1: SLAVE}
    routes.on_channel_destroy(SLAVE, None)  # by address, as Java falls back to
    assert routes.pick_up_topic_route_data("A") is None
    assert routes.broker_addr_table == {} and routes.cluster_addr_table == {} and routes.topic_queue_table == {}


def test_unregister_removes_like_expiry():
    routes = RouteInfoManager()
    register(routes, {"A": 4, "Shared": 4})
    register(routes, {"Shared": 4}, name="broker-b", addr="10.0.0.7:10911")
    routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    assert routes.pick_up_topic_route_data("A") is None
    assert [q.broker_name for q in routes.pick_up_topic_route_data("Shared").queue_datas] == ["broker-b"]
    assert routes.cluster_addr_table == {CLUSTER: {"broker-b"}}
    assert MASTER not in routes.broker_live_table


def test_write_perm_wipe_and_add_count_topics():
    routes = RouteInfoManager()
    register(routes, {"A": 4, "B": 4})
    register(routes, {"C": 4}, name="broker-b", addr="10.0.0.7:10911")
    assert routes.wipe_write_perm_of_broker("broker-a") == 2
    assert routes.pick_up_topic_route_data("A").queue_datas[0].perm == PermName.PERM_READ
    assert routes.pick_up_topic_route_data("C").queue_datas[0].perm == 6
    assert routes.add_write_perm_of_broker("broker-a") == 2
    assert routes.pick_up_topic_route_data("B").queue_datas[0].perm == 6
    assert routes.wipe_write_perm_of_broker("nobody") == 0


def test_delete_topic_everywhere_or_in_one_cluster():
    routes = RouteInfoManager()
    register(routes, {"A": 4, "B": 4})
    register(routes, {"A": 4, "B": 4}, name="broker-b", addr="10.0.0.7:10911", cluster="other")
    routes.delete_topic("A", "other")
    assert [q.broker_name for q in routes.pick_up_topic_route_data("A").queue_datas] == ["broker-a"]
    routes.delete_topic("A", CLUSTER)
    assert routes.pick_up_topic_route_data("A") is None
    routes.delete_topic("B")
    assert routes.get_all_topic_list().topic_list == []


def test_cluster_queries():
    routes = RouteInfoManager()
    register(routes, {"A": 4, "Both": 4})
    register(routes, {"Both": 4, "Z": 1}, name="broker-b", addr="10.0.0.7:10911", cluster="other")
    assert routes.get_topics_by_cluster(CLUSTER).topic_list == ["A", "Both"]
    assert routes.get_topics_by_cluster("other").topic_list == ["Both", "Z"]
    assert routes.get_topics_by_cluster("nope").topic_list == []
    info = routes.get_all_cluster_info()
    assert info.cluster_addr_table == {CLUSTER: ["broker-a"], "other": ["broker-b"]}
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: "10.0.0.7:10911"}
    system = routes.get_system_topic_list()
    assert sorted(system.topic_list) == sorted([CLUSTER, "broker-a", "other", "broker-b"])
    assert system.broker_addr == MASTER


def test_unit_topic_lists_read_the_sys_flag():
    routes = RouteInfoManager()
    wrapper = TopicConfigSerializeWrapper(
        {
            "plain": TopicConfig("plain", 1, 1),
            "unit": TopicConfig("unit", 1, 1, topic_sys_flag=1),
            "unitSub": TopicConfig("unitSub", 1, 1, topic_sys_flag=2),
            "both": TopicConfig("both", 1, 1, topic_sys_flag=3),
        }
    )
    routes.register_broker(CLUSTER, MASTER, "broker-a", 0, "", wrapper, None, None)
    assert routes.get_unit_topics().topic_list == ["unit", "both"]
    assert routes.get_has_unit_sub_topic_list().topic_list == ["unitSub", "both"]
    assert routes.get_has_unit_sub_un_unit_topic_list().topic_list == ["unitSub"]


def test_filter_servers_appear_in_routes():
    routes = RouteInfoManager()
    routes.register_broker(CLUSTER, MASTER, "broker-a", 0, "", topic_wrapper({"A": 1}), ["10.0.0.5:30000"], None)
    assert routes.pick_up_topic_route_data("A").filter_server_table == {MASTER: ["10.0.0.5:30000"]}
    routes.register_broker(CLUSTER, MASTER, "broker-a", 0, "", topic_wrapper({"A": 1}, 2), [], None)
    assert routes.pick_up_topic_route_data("A").filter_server_table == {}
