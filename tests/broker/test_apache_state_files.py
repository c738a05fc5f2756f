"""Issue 25 item 2: a store directory Apache 4.9.8 wrote opens in our broker.

4.9.8 checks no group name, so its state files hold groups (and their retry topics and offsets) under names
RocketMQ 5 refuses: blank, too long, with dots. The broker starts on them, serves the legal entries, leaves the
others out of its tables with one warning per file, and writes them back unchanged with every later write,
so Apache still opens the store. The fixture is ours, written in the shapes 4.9.8 writes (fastjson's pretty
format, unquoted queue ids); compat_tests/test_apache_state_files.py runs the same on a store Apache made.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from compat_tests.servers import GatewayServers, call
from gateway.client import blocking, build_message
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

FIXTURES = Path(__file__).parent / "fixtures"
CONFIG = FIXTURES / "apache-4.9.8-config"
KV_CONFIG = FIXTURES / "apache-4.9.8-kvConfig.json"

LEGAL_GROUP = "please_rename_unique_group_name_4"
DOTS = "com.example.orders-consumer"
LONG = "GID_long_" + "0123456789" * 13
# What the fixture holds that this broker refuses, per file and table property.
REFUSED = {
    ("subscriptionGroup.json", "subscriptionGroupTable"): {"", DOTS, LONG},
    ("topics.json", "topicConfigTable"): {"%RETRY%" + DOTS},
    ("consumerOffset.json", "offsetTable"): {
        "%RETRY%@",
        f"TopicTest@{DOTS}",
        f"TopicTest@{LONG}",
        f"%RETRY%{DOTS}@{DOTS}",
    },
    # Levels of 4.9.8's default messageDelayLevel past the two this broker is given.
    ("delayOffset.json", "offsetTable"): set(range(3, 19)),
}


def _table(path: Path, key: str) -> dict[Any, Any]:
    return fastjson.loads(path.read_bytes())[key]


def _admin(addr: str, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
    return call(addr, RemotingCommand.request(code, fields, body))


def test_a_store_apache_wrote_starts_serves_and_keeps_the_refused_entries(tmp_path: Path) -> None:
    config_dir = tmp_path / "store" / "config"
    shutil.copytree(CONFIG, config_dir)
    kv_path = tmp_path / "namesrv" / "kvConfig.json"
    kv_path.parent.mkdir()
    shutil.copy(KV_CONFIG, kv_path)
    servers = GatewayServers(tmp_path, {"messageDelayLevel": "1s 5s"}, namesrv_config={"kvConfigPath": str(kv_path)})
    servers.start()
    try:
        # One warning per file, naming it and every entry left out.
        for (name, _key), names in REFUSED.items():
            warnings = [line for line in servers.output if f"{name}: left out {len(names)} " in line]
            assert len(warnings) == 1, (name, servers.output)
        assert '"com.example.orders-consumer": The specified group: com.example.orders-consumer, contains' in (
            "".join(servers.output)
        )
        assert any(
            "kvConfig.json: left out 1 entry " in line and '"ORDER_TOPIC_CONFIG/orders.eu"' in line
            for line in servers.output
        )

        # The refused ones are not: no peer is shown them, no queue is made for them.
        groups = _admin(servers.broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        live_groups = set(fastjson.loads(groups.body)["subscriptionGroupTable"])
        assert LEGAL_GROUP in live_groups and not live_groups & {"", DOTS, LONG}
        topics = _admin(servers.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG, {})
        live_topics = set(fastjson.loads(topics.body)["topicConfigTable"])
        assert "%RETRY%" + LONG in live_topics and "%RETRY%" + DOTS not in live_topics

        # The legal entries are live: the group's committed offsets, the topic's queues, an order config.
        with blocking.PullConsumer(LEGAL_GROUP, servers.namesrv_addr) as consumer:
            queues = sorted(consumer.fetch_subscribe_message_queues("TopicTest"), key=lambda mq: mq.queue_id)
            assert [mq.queue_id for mq in queues] == [0, 1, 2, 3]
            assert [consumer.fetch_consume_offset(mq) for mq in queues] == [25, 25, 24, 26]
            # It serves: what is sent to the topic is pulled back.
            with blocking.Producer("apache_store_pg", servers.namesrv_addr) as producer:
                for i in range(8):
                    producer.send(build_message("TopicTest", b"m%d" % i), queue=queues[i % 4])
            bodies = sorted(m.body for mq in queues for m in consumer.pull(mq, "*", 0, 32).messages)
            assert bodies == [b"m%d" % i for i in range(8)]
            consumer.update_consume_offset(queues[0], 2)
            consumer.persist_consumer_offset()
        order = _admin(
            servers.namesrv_addr, RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicOrder"}
        )
        assert order.code == ResponseCode.SUCCESS and order.ext_fields["value"] == "broker-a:4"

        # Later writes of every file: a new group and topic, an offset (above), a KV value.
        update_group = _admin(
            servers.broker_addr,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            fastjson.dumps({"groupName": "new_group", "retryMaxTimes": 3}),
        )
        assert update_group.code == ResponseCode.SUCCESS, update_group.remark
        servers.create_topic("NewTopic", 2)
        put_kv = _admin(servers.namesrv_addr, RequestCode.PUT_KV_CONFIG, {"namespace": "ops", "key": "k", "value": "v"})
        assert put_kv.code == ResponseCode.SUCCESS
    finally:
        assert servers.stop() == 0, "".join(servers.output)

    assert not list((tmp_path / "store").glob(f"*/%RETRY%{DOTS}"))
    for (name, key), names in REFUSED.items():
        written, original = _table(config_dir / name, key), _table(CONFIG / name, key)
        assert {n: written.get(n) for n in names} == {n: original[n] for n in names}, name
    assert _table(config_dir / "subscriptionGroup.json", "subscriptionGroupTable")["new_group"]["retryMaxTimes"] == 3
    assert "NewTopic" in _table(config_dir / "topics.json", "topicConfigTable")
    assert _table(config_dir / "consumerOffset.json", "offsetTable")[f"TopicTest@{LEGAL_GROUP}"][0] == 2
    assert _table(kv_path, "configTable") == {
        "ORDER_TOPIC_CONFIG": {"orders.eu": "broker-a:2", "TopicOrder": "broker-a:4"},
        "ops": {"k": "v"},
    }
