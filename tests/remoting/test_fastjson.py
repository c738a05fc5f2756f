"""fastjson's JSON dialect: unquoted integer keys, object keys, and the golden route bodies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.remoting import fastjson
from gateway.remoting.bodies import BrokerData, MessageQueue, QueueData, TopicRouteData
from gateway.remoting.codec import FrameDecoder
from gateway.remoting.fastjson import FastJsonError, FrozenDict

from .golden import frame

SETTINGS = settings(max_examples=200, deadline=None, database=None)


def test_unquoted_int_keys() -> None:
    assert fastjson.loads(b'{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}}') == {
        "brokerAddrs": {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    }
    assert fastjson.loads('{"offsetTable":{"T@G":{0:12,-1:5}}}') == {"offsetTable": {"T@G": {0: 12, -1: 5}}}


def test_object_keys_are_hashable_frozen_dicts() -> None:
    text = b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":9,"consumerOffset":4}}}'
    obj = fastjson.loads(text)
    [(key, value)] = obj["offsetTable"].items()
    assert isinstance(key, FrozenDict)
    assert key == {"brokerName": "b", "queueId": 0, "topic": "t"}
    assert value == {"brokerOffset": 9, "consumerOffset": 4}
    # Equal dicts hash equally whatever their key order, so lookups by an equal key work.
    same = FrozenDict({"topic": "t", "queueId": 0, "brokerName": "b"})
    assert hash(same) == hash(key)
    assert obj["offsetTable"][same] == value
    assert MessageQueue.from_json(key) == MessageQueue("t", "b", 0)


def test_nested_and_whitespace() -> None:
    text = '{ "a" : { 1 : [ {2:{"x":[true,false,null,1.5,-3]}} ] } ,\n\t"b":{} , "c":[] }'
    assert fastjson.loads(text) == {"a": {1: [{2: {"x": [True, False, None, 1.5, -3]}}]}, "b": {}, "c": []}


def test_array_keys_become_tuples() -> None:
    assert fastjson.loads("{[1,2]:3}") == {(1, 2): 3}


def test_single_quoted_strings() -> None:
    assert fastjson.loads("{'a':'b\"c'}") == {"a": 'b"c'}


def test_escapes_in_relaxed_path() -> None:
    assert fastjson.loads('{0:"KEYS\\u0001k\\u0002\\"q\\"\\\\"}') == {0: 'KEYS\x01k\x02"q"\\'}


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@SETTINGS
@given(JSON)
def test_standard_json_path(value: object) -> None:
    text = json.dumps(value)
    assert fastjson.loads(text) == value
    assert fastjson.loads(text.encode()) == value
    assert fastjson.loads(fastjson.dumps_standard(value)) == value


def _strip_nulls(v: object) -> object:
    if isinstance(v, dict):
        return {k: _strip_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_strip_nulls(x) for x in v]
    return v


FAST = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(-(2**31), 2**31 - 1), inner, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(FAST)
def test_fastjson_dumps_loads_round_trip(value: object) -> None:
    """dumps writes int keys unquoted and omits null map values, as fastjson; loads reads it back."""
    assert fastjson.loads(fastjson.dumps(value)) == _strip_nulls(value)


def test_dumps_int_keys_unquoted() -> None:
    assert fastjson.dumps({"brokerAddrs": {0: "127.0.0.1:10911"}}) == b'{"brokerAddrs":{0:"127.0.0.1:10911"}}'
    assert fastjson.dumps({-5: 1}) == b"{-5:1}"


def test_dumps_object_keys() -> None:
    key = FrozenDict({"brokerName": "b", "queueId": 0, "topic": "t"})
    assert fastjson.dumps({key: 5}) == b'{{"brokerName":"b","queueId":0,"topic":"t"}:5}'
    # Objects with to_json() are written through it, as keys too.
    assert (
        fastjson.dumps({MessageQueue("t", "b", 1): {"x": 1}}) == b'{{"brokerName":"b","queueId":1,"topic":"t"}:{"x":1}}'
    )
    assert fastjson.loads(fastjson.dumps({key: 5})) == {key: 5}


def test_dumps_details() -> None:
    assert fastjson.dumps({"a": None, "b": 1}) == b'{"b":1}'  # null map values omitted
    assert fastjson.dumps([None, 1]) == b"[null,1]"
    assert fastjson.dumps({"s": "x\x01y"}) == b'{"s":"x\\u0001y"}'
    assert fastjson.dumps({"u": "日本"}) == '{"u":"日本"}'.encode()  # raw UTF-8, not \\u escapes
    assert fastjson.dumps((1, 2)) == b"[1,2]"


def test_dumps_standard_quotes_and_sorts_keys() -> None:
    assert fastjson.dumps_standard({"b": {1: "x", 0: "y"}, "a": 1}) == b'{"a":1,"b":{"0":"y","1":"x"}}'
    assert json.loads(fastjson.dumps_standard({"s": {1, 2}}))["s"] in ([1, 2], [2, 1])


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        "",
        "   ",
        "{",
        "}",
        "[1,]",
        "[1 2]",
        "{0 1}",
        "{0:}",
        '{"a":1,}',
        '{"a":1} x',
        '"abc',
        "tru",
        "nul",
        "{abc:1}",
        '{0:"\\x"}',
        "[",
        b"\xff",
        bytearray(b"{0:"),
        memoryview(b"{0:"),
    ],
)
def test_bad_input_raises_fastjson_error(bad: bytes | str) -> None:
    with pytest.raises(FastJsonError):
        fastjson.loads(bad)
    assert issubclass(FastJsonError, ValueError)


def test_invalid_utf8_is_replaced_as_java_does() -> None:
    # RemotingSerializable.decode is new String(bytes, UTF_8): malformed bytes become U+FFFD.
    assert fastjson.loads(b'{0:"a\xffb"}') == {0: "a\ufffdb"}
    assert fastjson.loads(b'{"k":"\xff"}') == {"k": "\ufffd"}


def test_memoryview_and_bytearray_input() -> None:
    assert fastjson.loads(memoryview(b"{0:1}")) == {0: 1}
    assert fastjson.loads(bytearray(b"{0:1}")) == {0: 1}


# ---------------------------------------------------------------------------- golden route bodies


def _body(name: str) -> bytes:
    [cmd] = FrameDecoder().feed(frame(name))
    return cmd.body


def _expected_route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("broker-a", 4, 4, 6, 0)],
        broker_datas=[BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})],
        filter_server_table={},
    )


def test_golden_route_fastjson_form_for_cpp() -> None:
    """Version 63 (C++) gets unquoted integer keys; we read and write that body byte for byte."""
    body = _body("cpp_code105_resp")
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in body
    with pytest.raises(ValueError):
        json.loads(body)
    route = TopicRouteData.from_json(fastjson.loads(body))
    assert route == _expected_route()
    assert route.broker_datas[0].master_addr() == "127.0.0.1:10911"
    assert fastjson.dumps(route.to_json()) == body
    assert fastjson.dumps(route) == body


def test_golden_route_standard_form_for_java() -> None:
    """Version 409 (Java 4.9.8) gets standard JSON with quoted keys; byte for byte too."""
    body = _body("java_code105_resp")
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in body
    route = TopicRouteData.from_json(fastjson.loads(body))
    assert route == _expected_route()
    assert fastjson.dumps_standard(route.to_json()) == body
    assert fastjson.dumps_standard(route) == body
    assert json.loads(body) == json.loads(fastjson.dumps_standard(route))


def test_golden_register_broker_body_parses() -> None:
    body = _body("java_code103_req")
    obj = fastjson.loads(body)
    assert obj["filterServerList"] == []
    table = obj["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert table["TopicTest"]["readQueueNums"] == 4
    assert table["SCHEDULE_TOPIC_XXXX"]["writeQueueNums"] == 18
