"""Issue 25 item 2 with a store Apache 4.9.8 wrote, run when ``ROCKETMQ_BROKER_CLASSPATH`` (and mqadmin's
``ROCKETMQ_MQADMIN_CLASSPATH``) name its jars: Apache runs a C++ producer, C++ consumers (one of a group with
dots, one of a group longer than 5.x allows) and mqadmin commands, and writes their groups, retry topics,
offsets and an order config under names our broker refuses (and, from an ordinary run, a group named ``""``).
Our NameServer and broker then start on that store, serve its messages and offsets, keep the refused entries
in every file they rewrite, and Apache starts on the store again. tests/broker/test_apache_state_files.py runs
the same on a fixture in these shapes, without Apache.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.names import group_problem, topic_problem

from .apache_broker import apache_cluster
from .servers import GatewayServers, call
from .test_cpp_client import check_messages, consume, produce, pull_all
from .test_mqadmin import mqadmin

pytestmark = pytest.mark.compat
TOPIC = "TopicTest"
GROUP = "cpp_cg"
DOTS = "com.example.orders-consumer"
LONG = "GID_long_" + "0123456789" * 13
ORDER = "ORDER_TOPIC_CONFIG"
# file → the property holding its table.
TABLES = {
    "subscriptionGroup.json": "subscriptionGroupTable",
    "topics.json": "topicConfigTable",
    "consumerOffset.json": "offsetTable",
}


def _refused(name: str, key: str) -> bool:
    if name == "consumerOffset.json":
        topic, _, group = key.rpartition("@")
        return bool(topic_problem(topic) or group_problem(group))
    return bool((group_problem if name == "subscriptionGroup.json" else topic_problem)(key))


def _tables(config_dir: Path, kv_path: Path) -> dict[str, dict[str, Any]]:
    tables = {name: fastjson.loads((config_dir / name).read_bytes())[key] for name, key in TABLES.items()}
    tables["kvConfig.json"] = fastjson.loads(kv_path.read_bytes())["configTable"][ORDER]
    return tables


def test_our_broker_opens_serves_and_keeps_a_store_apache_wrote(tmp_path: Path) -> None:
    root = tmp_path / "node"  # Apache's store and ours: root/store; both NameServers' kvConfig.json
    config_dir = root / "store" / "config"
    kv_path = root / "namesrv" / "kvConfig.json"
    namesrv_settings = {"kvConfigPath": str(kv_path)}
    admin_home = tmp_path / "mqadmin"

    with apache_cluster(root, namesrv_settings=namesrv_settings) as (namesrv, _broker):
        apache = SimpleNamespace(namesrv_addr=namesrv)
        mqadmin(admin_home, namesrv, "updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")
        produce(tmp_path, apache, TOPIC, "apache", 20)
        for group in (GROUP, DOTS, LONG):
            check_messages(consume(tmp_path, apache, TOPIC, group, 20).messages, "apache", range(20), TOPIC, group)
        mqadmin(admin_home, namesrv, "consumerProgress", "-g", GROUP)
        mqadmin(admin_home, namesrv, "updateOrderConf", "-t", "orders.eu", "-v", "broker-a:2", "-m", "put")
        mqadmin(admin_home, namesrv, "updateOrderConf", "-t", "TopicOrder", "-v", "broker-a:4", "-m", "put")
    apache_wrote = _tables(config_dir, kv_path)
    refused = {name: {k for k in table if _refused(name, k)} for name, table in apache_wrote.items()}
    assert {"", DOTS, LONG} <= refused["subscriptionGroup.json"]
    assert f"%RETRY%{DOTS}" in refused["topics.json"]
    assert {f"{TOPIC}@{DOTS}", f"{TOPIC}@{LONG}"} <= refused["consumerOffset.json"]
    assert refused["kvConfig.json"] == {"orders.eu"}

    ours = GatewayServers(root, namesrv_config=namesrv_settings).start()
    try:
        for name, names in refused.items():
            assert any(f"{name}: left out {len(names)} " in line for line in ours.output), ours.output
        # Apache's messages are served, and the group resumes at the offsets Apache stored: it gets what is sent
        # now, and again only what lies at or past them (a queue the C++ consumer stopped before committing to
        # Apache starts over).
        pulled = pull_all(tmp_path, ours, TOPIC).messages
        check_messages(pulled, "apache", range(20), TOPIC, "pull from ours")
        committed = {int(q): offset for q, offset in apache_wrote["consumerOffset.json"][f"{TOPIC}@{GROUP}"].items()}
        behind = [int(m["props"]["idx"]) for m in pulled if m["queue_offset"] >= committed.get(m["queue_id"], 0)]
        produce(tmp_path, ours, TOPIC, "apache", 8, start=20)
        resumed = consume(tmp_path, ours, TOPIC, GROUP, 8 + len(behind)).messages
        check_messages(resumed, "apache", [*behind, *range(20, 28)], TOPIC, GROUP)
        # Every file written again: a group, a topic, an order config (offsets: the consumer above).
        mqadmin(admin_home, ours.namesrv_addr, "updateSubGroup", "-c", "DefaultCluster", "-g", "our_group")
        mqadmin(admin_home, ours.namesrv_addr, "updateTopic", "-c", "DefaultCluster", "-t", "OurTopic")
        mqadmin(admin_home, ours.namesrv_addr, "updateOrderConf", "-t", "OurTopic", "-v", "broker-a:8", "-m", "put")
    finally:
        assert ours.stop() == 0, "".join(ours.output)
    we_wrote = _tables(config_dir, kv_path)
    for name, names in refused.items():
        assert {k: we_wrote[name].get(k) for k in names} == {k: apache_wrote[name][k] for k in names}, name
    assert "our_group" in we_wrote["subscriptionGroup.json"] and "OurTopic" in we_wrote["topics.json"]
    assert we_wrote["kvConfig.json"]["OurTopic"] == "broker-a:8"
    assert min(we_wrote["consumerOffset.json"][f"{TOPIC}@{GROUP}"].values()) > 5

    # And Apache opens the store again: its groups, refused here, are there, and every message.
    with apache_cluster(root, namesrv_settings=namesrv_settings) as (namesrv, broker):
        groups = call(broker, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        table = fastjson.loads(groups.body)["subscriptionGroupTable"]
        assert {"", DOTS, LONG, GROUP, "our_group"} <= set(table)
        apache = SimpleNamespace(namesrv_addr=namesrv)
        check_messages(pull_all(tmp_path, apache, TOPIC).messages, "apache", range(28), TOPIC, "pull from Apache")
