"""KVConfigManager: the table, its kvConfig.json (Java's form) and the .bak fallback."""

from __future__ import annotations

import json

from gateway.namesrv.kvconfig import KVConfigManager


def test_put_get_delete_and_list(tmp_path):
    kv = KVConfigManager(tmp_path / "kvConfig.json")
    kv.put_kv_config("ns", "k1", "v1")
    kv.put_kv_config("ns", "k2", "v2")
    assert kv.get_kv_config("ns", "k1") == "v1"
    assert kv.get_kv_config("ns", "missing") is None
    assert kv.get_kv_config("other", "k1") is None
    kv.delete_kv_config("ns", "k1")
    assert kv.get_kv_list_by_namespace("ns") == {"k2": "v2"}
    kv.delete_kv_config("ns", "k2")
    assert kv.get_kv_list_by_namespace("ns") == {}  # the namespace outlives its keys, as in Java
    assert kv.get_kv_list_by_namespace("other") is None


def test_file_has_java_form_and_is_reloaded(tmp_path):
    path = tmp_path / "namesrv" / "kvConfig.json"
    kv = KVConfigManager(path)
    kv.put_kv_config("ORDER_TOPIC_CONFIG", "TopicOrder", "broker-a:4")
    kv.put_kv_config("ORDER_TOPIC_CONFIG", "TopicOrder", "broker-a:8")
    assert json.loads(path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {"TopicOrder": "broker-a:8"}}}
    assert json.loads((tmp_path / "namesrv" / "kvConfig.json.bak").read_text()) == {
        "configTable": {"ORDER_TOPIC_CONFIG": {"TopicOrder": "broker-a:4"}}
    }
    again = KVConfigManager(path)
    again.load()
    assert again.get_kv_config("ORDER_TOPIC_CONFIG", "TopicOrder") == "broker-a:8"


def test_corrupt_file_falls_back_to_bak(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_text("{not json")
    (tmp_path / "kvConfig.json.bak").write_text('{"configTable":{"ns":{"k":"v"}}}')
    kv = KVConfigManager(path)
    kv.load()
    assert kv.get_kv_config("ns", "k") == "v"


def test_missing_file_is_an_empty_table(tmp_path):
    kv = KVConfigManager(tmp_path / "absent.json")
    kv.load()
    assert kv.config_table == {}


def test_values_read_as_java_reads_them_and_non_text_ones_kept_in_the_file(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_text(
        '{"configTable":{"ns":{"flag":true,"n":5,"gone":null,"obj":{"a":1}},"ORDER_TOPIC_CONFIG":{"a.b":"x"}}}'
    )
    kv = KVConfigManager(path)
    kv.load()
    # fastjson reads a number or boolean into a String as its text; a null or object is no value here.
    assert kv.get_kv_list_by_namespace("ns") == {"flag": "true", "n": "5"}
    assert kv.get_kv_list_by_namespace("ORDER_TOPIC_CONFIG") == {}  # not a topic name: never routed
    kv.put_kv_config("ns", "n", "6")
    assert json.loads(path.read_text())["configTable"] == {
        "ns": {"flag": "true", "n": "6", "obj": {"a": 1}},  # a null is left out, as fastjson writes maps
        "ORDER_TOPIC_CONFIG": {"a.b": "x"},
    }
