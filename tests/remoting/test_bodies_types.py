"""JSON bodies read as fastjson reads them into the Java field types (issue 8 item 5 and its class).

Each property is coerced as fastjson would (``5`` -> ``"5"`` for a String, ``"12"`` -> 12 for an int, ``"true"`` ->
true for a boolean) or the body is refused with :class:`BodyError`; topic and group names are checked as they are
read; every body survives ``to_json`` -> fastjson text -> ``from_json`` unchanged.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.namesrv.processors import decode_register_broker_body
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    BodyError,
    BrokerData,
    CheckClientRequestBody,
    ClusterInfo,
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    DataVersion,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from gateway.remoting.codes import ResponseCode
from gateway.remoting.names import InvalidNameError

# The smallest valid body of each class: the tests below change one property at a time.
BASE: dict[type, dict[str, Any]] = {
    SubscriptionGroupConfig: {"groupName": "g"},
    TopicConfig: {"topicName": "T"},
    MessageQueue: {"topic": "T", "brokerName": "b", "queueId": 0},
    SubscriptionData: {"topic": "T"},
    ConsumerData: {"groupName": "g"},
    ProducerData: {"groupName": "g"},
    HeartbeatData: {"clientID": "c"},
    LockBatchRequestBody: {"consumerGroup": "g", "clientId": "c"},
    CheckClientRequestBody: {"clientId": "c"},
    DataVersion: {},
    QueueData: {},
    BrokerData: {},
    TopicList: {},
    TopicRouteData: {},
    KVTable: {},
    ClusterInfo: {},
    RegisterBrokerBody: {},
    TopicConfigSerializeWrapper: {},
    SubscriptionGroupWrapper: {},
    LockBatchResponseBody: {},
}

# (class, property, attribute, Java type); "+int" is an int that must not be negative.
SCALARS = [
    (SubscriptionGroupConfig, "consumeEnable", "consume_enable", "boolean"),
    (SubscriptionGroupConfig, "consumeFromMinEnable", "consume_from_min_enable", "boolean"),
    (SubscriptionGroupConfig, "consumeBroadcastEnable", "consume_broadcast_enable", "boolean"),
    (SubscriptionGroupConfig, "retryQueueNums", "retry_queue_nums", "+int"),
    (SubscriptionGroupConfig, "retryMaxTimes", "retry_max_times", "int"),
    (SubscriptionGroupConfig, "brokerId", "broker_id", "long"),
    (SubscriptionGroupConfig, "whichBrokerWhenConsumeSlowly", "which_broker_when_consume_slowly", "long"),
    (SubscriptionGroupConfig, "notifyConsumerIdsChangedEnable", "notify_consumer_ids_changed_enable", "boolean"),
    (SubscriptionGroupConfig, "consumeMessageOrderly", "consume_message_orderly", "boolean"),
    (TopicConfig, "readQueueNums", "read_queue_nums", "+int"),
    (TopicConfig, "writeQueueNums", "write_queue_nums", "+int"),
    (TopicConfig, "perm", "perm", "int"),
    (TopicConfig, "topicSysFlag", "topic_sys_flag", "int"),
    (TopicConfig, "order", "order", "boolean"),
    (MessageQueue, "brokerName", "broker_name", "String"),
    (MessageQueue, "queueId", "queue_id", "+int"),
    (SubscriptionData, "subString", "sub_string", "String"),
    (SubscriptionData, "subVersion", "sub_version", "long"),
    (SubscriptionData, "expressionType", "expression_type", "String"),
    (SubscriptionData, "classFilterMode", "class_filter_mode", "boolean"),
    (ConsumerData, "unitMode", "unit_mode", "boolean"),
    (HeartbeatData, "clientID", "client_id", "String"),
    (LockBatchRequestBody, "clientId", "client_id", "String"),
    (CheckClientRequestBody, "clientId", "client_id", "String"),
    (DataVersion, "timestamp", "timestamp", "long"),
    (DataVersion, "counter", "counter", "long"),
    (QueueData, "brokerName", "broker_name", "String"),
    (QueueData, "readQueueNums", "read_queue_nums", "+int"),
    (QueueData, "writeQueueNums", "write_queue_nums", "+int"),
    (QueueData, "perm", "perm", "int"),
    (QueueData, "topicSysFlag", "topic_sys_flag", "int"),
    (BrokerData, "cluster", "cluster", "String"),
    (BrokerData, "brokerName", "broker_name", "String"),
    (TopicList, "brokerAddr", "broker_addr", "String"),
    (TopicRouteData, "orderTopicConf", "order_topic_conf", "String"),
]

# What fastjson makes of each JSON value for each Java type (TypeUtils.castToXxx, StringCodec, BooleanCodec).
ACCEPTED: dict[str, list[tuple[Any, Any]]] = {
    "String": [("x y", "x y"), (5, "5"), (-12, "-12"), (True, "true"), (False, "false")],
    "int": [
        (7, 7),
        ("12", 12),
        ("-3", -3),
        ("+4", 4),
        ("007", 7),
        (True, 1),
        (False, 0),
        (1.9, 1),
        (-1.9, -1),
        (INT32_MAX, INT32_MAX),
        (INT32_MIN, INT32_MIN),
    ],
    "+int": [(7, 7), ("12", 12), (True, 1), (2.5, 2), (0, 0), (INT32_MAX, INT32_MAX)],
    "long": [
        (7, 7),
        ("1700000000000", 1_700_000_000_000),
        (True, 1),
        (3.7, 3),
        (INT64_MAX, INT64_MAX),
        (INT64_MIN, INT64_MIN),
    ],
    "boolean": [
        (True, True),
        (False, False),
        ("true", True),
        ("TRUE", True),
        ("False", False),
        ("1", True),
        ("0", False),
        (1, True),
        (0, False),
    ],
}
REFUSED: dict[str, list[Any]] = {
    "String": [{"a": 1}, [1], [], 1.5],
    "int": [
        {},
        [],
        [1],
        "1.5",
        "abc",
        " 1",
        "1e3",
        "0x10",
        INT32_MAX + 1,
        INT32_MIN - 1,
        1e10,
        float("inf"),
        float("nan"),
        "9" * 5000,
    ],
    "+int": [{}, [], "x", INT32_MAX + 1, 2**64, "-" + "9" * 5000],
    "long": [{}, [], "12a", INT64_MAX + 1, INT64_MIN - 1, "9223372036854775808", 1e19, "9" * 5000],
    "boolean": [2, -1, "yes", "2", "t", 1.0, {}, [], [True]],
}
# Absent, null and "" keep the Java default (castToXxx("") is null).
DEFAULT_FOR_EMPTY = {"int", "+int", "long", "boolean"}


def _with(cls: type, key: str, value: Any) -> dict[str, Any]:
    return {**BASE[cls], key: value}


def _cases(table: dict[str, list[Any]]) -> list[Any]:
    return [
        pytest.param(cls, key, attr, case, id=f"{cls.__name__}.{key}={case!r}"[:80])
        for cls, key, attr, kind in SCALARS
        for case in table[kind]
    ]


@pytest.mark.parametrize(("cls", "key", "attr", "case"), _cases(ACCEPTED))
def test_fastjson_coercions_are_accepted(cls: type, key: str, attr: str, case: tuple[Any, Any]) -> None:
    sent, expected = case
    value = getattr(cls.from_json(_with(cls, key, sent)), attr)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("cls", "key", "attr", "sent"), _cases(REFUSED))
def test_wrong_types_are_refused(cls: type, key: str, attr: str, sent: Any) -> None:
    with pytest.raises(BodyError, match=f"body field '{key}'") as e:
        cls.from_json(_with(cls, key, sent))
    assert e.value.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(("cls", "key", "attr"), [(c, k, a) for c, k, a, kind in SCALARS if kind in DEFAULT_FOR_EMPTY])
def test_missing_null_and_empty_keep_the_default(cls: type, key: str, attr: str) -> None:
    default = getattr(cls.from_json(BASE[cls]), attr)
    assert getattr(cls.from_json(_with(cls, key, None)), attr) == default
    assert getattr(cls.from_json(_with(cls, key, "")), attr) == default


@pytest.mark.parametrize(("cls", "key"), [(c, k) for c, k, _, kind in SCALARS if kind == "+int"])
def test_negative_counts_and_queue_ids_are_invalid_parameters(cls: type, key: str) -> None:
    for sent in (-1, "-1", INT32_MIN):
        with pytest.raises(BodyError, match="must not be negative") as e:
            cls.from_json(_with(cls, key, sent))
        assert e.value.code == ResponseCode.INVALID_PARAMETER


def test_issue_8_item_5_an_int_group_name_reads_as_its_text() -> None:
    cfg = SubscriptionGroupConfig.from_json(fastjson.loads(b'{"groupName":5,"retryQueueNums":"2"}'))
    assert (cfg.group_name, cfg.retry_queue_nums) == ("5", 2)


# (class, property) of every array and every map
ARRAYS = [
    (HeartbeatData, "producerDataSet"),
    (HeartbeatData, "consumerDataSet"),
    (ConsumerData, "subscriptionDataSet"),
    (SubscriptionData, "tagsSet"),
    (SubscriptionData, "codeSet"),
    (LockBatchRequestBody, "mqSet"),
    (LockBatchResponseBody, "lockOKMQSet"),
    (RegisterBrokerBody, "filterServerList"),
    (TopicList, "topicList"),
    (TopicRouteData, "queueDatas"),
    (TopicRouteData, "brokerDatas"),
]
MAPS = [
    (TopicConfigSerializeWrapper, "topicConfigTable"),
    (SubscriptionGroupWrapper, "subscriptionGroupTable"),
    (BrokerData, "brokerAddrs"),
    (KVTable, "table"),
    (ClusterInfo, "brokerAddrTable"),
    (ClusterInfo, "clusterAddrTable"),
    (TopicRouteData, "filterServerTable"),
]


@pytest.mark.parametrize(("cls", "key"), ARRAYS)
def test_arrays_must_be_arrays(cls: type, key: str) -> None:
    cls.from_json(_with(cls, key, None))  # null reads as empty
    for sent in ({}, {"a": 1}, "x", 5, True):
        with pytest.raises(BodyError, match=f"'{key}': expected an array"):
            cls.from_json(_with(cls, key, sent))


@pytest.mark.parametrize(("cls", "key"), MAPS)
def test_maps_must_be_objects(cls: type, key: str) -> None:
    cls.from_json(_with(cls, key, None))
    for sent in ([], [1], "x", 5, False):
        with pytest.raises(BodyError, match=f"'{key}': expected an object"):
            cls.from_json(_with(cls, key, sent))


@pytest.mark.parametrize("cls", list(BASE))
def test_a_body_must_be_an_object(cls: type) -> None:
    for sent in ([], [BASE[cls]], "x", 5, True):
        with pytest.raises(BodyError, match=r"^body: expected an object"):
            cls.from_json(sent)


@pytest.mark.parametrize(
    ("body", "remark"),
    [
        ({"clientID": "c", "producerDataSet": ["pg"]}, "'producerDataSet': expected an object, got a string"),
        ({"clientID": "c", "producerDataSet": [{"groupName": ["pg"]}]}, "'groupName': expected a string, got an array"),
        (
            {"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [5]}]},
            "'subscriptionDataSet': expected an object",
        ),
        (
            {"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": {}}]}]},
            "'topic': expected a string",
        ),
    ],
)
def test_nested_items_are_checked_and_named(body: dict[str, Any], remark: str) -> None:
    with pytest.raises(BodyError, match=remark):
        HeartbeatData.from_json(body)


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (SubscriptionData, {"topic": "T", "tagsSet": ["a", {}]}),
        (SubscriptionData, {"topic": "T", "tagsSet": [None]}),
        (SubscriptionData, {"topic": "T", "codeSet": ["x"]}),
        (SubscriptionData, {"topic": "T", "codeSet": [2**40]}),
        (BrokerData, {"brokerAddrs": {"zero": "a"}}),
        (BrokerData, {"brokerAddrs": {"0": ["a"]}}),
        (KVTable, {"table": {"k": {"v": 1}}}),
        (ClusterInfo, {"clusterAddrTable": {"c": "broker-a"}}),
        (TopicRouteData, {"filterServerTable": {"a": [[]]}}),
        (RegisterBrokerBody, {"filterServerList": [{}]}),
        (TopicConfigSerializeWrapper, {"topicConfigTable": {"T": []}}),
    ],
)
def test_items_and_values_have_their_types(cls: type, body: dict[str, Any]) -> None:
    with pytest.raises(BodyError):
        cls.from_json(body)


def test_items_and_keys_are_coerced_as_fastjson_does() -> None:
    sub = SubscriptionData.from_json({"topic": "T", "tagsSet": ["a", 7], "codeSet": ["5", 6], "subVersion": "17"})
    assert (sub.tags_set, sub.code_set, sub.sub_version) == (["a", "7"], [5, 6], 17)
    assert BrokerData.from_json({"brokerAddrs": {"0": "a:1", 1: "b:1"}}).broker_addrs == {0: "a:1", 1: "b:1"}
    assert KVTable.from_json({"table": {5: 6, "k": True}}).table == {"5": "6", "k": "true"}
    wrapper = TopicConfigSerializeWrapper.from_json({"topicConfigTable": {5: {"topicName": 5}}, "dataVersion": None})
    assert list(wrapper.topic_config_table) == ["5"] and wrapper.topic_config_table["5"].topic_name == "5"


def test_enums_are_names_or_ordinals_and_unknown_ones_the_default() -> None:
    read = ConsumerData.from_json
    assert read({"groupName": "g", "consumeType": "CONSUME_ACTIVELY"}).consume_type is ConsumeType.CONSUME_ACTIVELY
    assert read({"groupName": "g", "consumeType": 0}).consume_type is ConsumeType.CONSUME_ACTIVELY
    assert read({"groupName": "g", "messageModel": 0}).message_model is MessageModel.BROADCASTING
    assert read({"groupName": "g", "consumeFromWhere": 5}).consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    assert read({"groupName": "g", "consumeType": "BOGUS"}).consume_type is ConsumeType.CONSUME_PASSIVELY
    assert read({"groupName": "g", "consumeType": 99}).consume_type is ConsumeType.CONSUME_PASSIVELY
    for sent in ({}, [], 1.5, True):
        with pytest.raises(BodyError, match="'consumeType': expected a ConsumeType name or ordinal"):
            read({"groupName": "g", "consumeType": sent})
    assert TopicConfig.from_json({"topicName": "T", "topicFilterType": 1}).topic_filter_type == "MULTI_TAG"
    assert TopicConfig.from_json({"topicName": "T", "topicFilterType": "MULTI_TAG"}).topic_filter_type == "MULTI_TAG"
    assert TopicConfig.from_json({"topicName": "T", "topicFilterType": "X"}).topic_filter_type == "SINGLE_TAG"


# -- names

ILLEGAL = ["", "  ", "../../../outside/x", "a/b", "abc\n", "a b", "tópico", "a\x00", "x" * 256]
# (class, body with the name at "?", topic or group)
NAMED = [
    (SubscriptionGroupConfig, {"groupName": "?"}, "group"),
    (ProducerData, {"groupName": "?"}, "group"),
    (ConsumerData, {"groupName": "?"}, "group"),
    (LockBatchRequestBody, {"consumerGroup": "?", "clientId": "c"}, "group"),
    (CheckClientRequestBody, {"clientId": "c", "group": "?"}, "group"),
    (TopicConfig, {"topicName": "?"}, "topic"),
    (SubscriptionData, {"topic": "?"}, "topic"),
    (MessageQueue, {"topic": "?", "brokerName": "b", "queueId": 0}, "topic"),
    (TopicConfigSerializeWrapper, {"topicConfigTable": {"?": {"topicName": "T"}}}, "topic"),
    (SubscriptionGroupWrapper, {"subscriptionGroupTable": {"?": {"groupName": "g"}}}, "group"),
    (SubscriptionGroupWrapper, {"subscriptionGroupTable": {"g": {"groupName": "?"}}}, "group"),
    (HeartbeatData, {"clientID": "c", "producerDataSet": [{"groupName": "?"}]}, "group"),
    (HeartbeatData, {"clientID": "c", "consumerDataSet": [{"groupName": "?"}]}, "group"),
    (HeartbeatData, {"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "?"}]}]}, "topic"),
    (LockBatchRequestBody, {"consumerGroup": "g", "mqSet": [{"topic": "?", "queueId": 1}]}, "topic"),
    (RegisterBrokerBody, {"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"topicName": "?"}}}}, "topic"),
]


def _named(body: Any, name: str) -> Any:
    if body == "?":
        return name
    if isinstance(body, dict):
        return {_named(k, name): _named(v, name) for k, v in body.items()}
    if isinstance(body, list):
        return [_named(v, name) for v in body]
    return body


@pytest.mark.parametrize(("cls", "body", "kind"), NAMED)
def test_illegal_names_are_refused(cls: type, body: dict[str, Any], kind: str) -> None:
    for name in ILLEGAL:
        if name == "" and cls is CheckClientRequestBody:
            continue  # only for logging, and optional there
        with pytest.raises(InvalidNameError, match=f"The specified {kind}"):
            cls.from_json(_named(body, name))
    cls.from_json(_named(body, "Legal_name-1%|x"))


def test_compressed_register_broker_body_is_read_like_the_json_one() -> None:
    def compressed(topic_line: str) -> bytes:
        parts = [b'{"counter":3,"timestamp":"9"}']
        raw = struct.pack(">i", len(parts[0])) + parts[0] + struct.pack(">i", 1)
        line = topic_line.encode()
        raw += struct.pack(">i", len(line)) + line + struct.pack(">i", 2) + b"[]"
        return zlib.compress(raw)

    body, refused = decode_register_broker_body(compressed("T 4 8 6 SINGLE_TAG"), True)
    tc = body.topic_config_serialize_wrapper.topic_config_table["T"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 8, 6)
    assert body.topic_config_serialize_wrapper.data_version == DataVersion(timestamp=9, counter=3)
    assert not refused.reasons
    # A name the codec refuses is set aside, as in the JSON form, never a key of the body.
    body, refused = decode_register_broker_body(compressed("../x 4 8 6 SINGLE_TAG"), True)
    assert body.topic_config_serialize_wrapper.topic_config_table == {}
    assert list(refused.reasons) == ["../x"] and "contains illegal characters" in refused.reasons["../x"]
    with pytest.raises(BodyError):
        decode_register_broker_body(compressed("T 4 99999999999 6 SINGLE_TAG"), True)
    with pytest.raises(BodyError, match="must not be negative"):
        decode_register_broker_body(compressed("T -4 8 6 SINGLE_TAG"), True)


# -- round trips over valid values

NAMES = st.from_regex(r"[%|a-zA-Z0-9_-]{1,40}", fullmatch=True)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
NONEMPTY = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
INT32 = st.integers(INT32_MIN, INT32_MAX)
COUNT = st.integers(0, INT32_MAX)
INT64 = st.integers(INT64_MIN, INT64_MAX)

MESSAGE_QUEUES = st.builds(MessageQueue, NAMES, TEXT, COUNT)
SUBSCRIPTIONS = st.builds(
    SubscriptionData,
    NAMES,
    NONEMPTY,
    st.lists(TEXT, max_size=3),
    st.lists(INT32, max_size=3),
    INT64,
    NONEMPTY,
    st.booleans(),
)
TOPIC_CONFIGS = st.builds(
    TopicConfig, NAMES, COUNT, COUNT, INT32, st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]), INT32, st.booleans()
)
VERSIONS = st.builds(DataVersion, INT64, INT64)
WRAPPERS = st.builds(
    TopicConfigSerializeWrapper,
    st.lists(TOPIC_CONFIGS, max_size=3).map(lambda tcs: {tc.topic_name: tc for tc in tcs}),
    VERSIONS,
)
BROKER_DATAS = st.builds(BrokerData, TEXT, TEXT, st.dictionaries(INT64, TEXT, max_size=3))
GROUP_CONFIGS = st.builds(
    SubscriptionGroupConfig,
    NAMES,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    COUNT,
    INT32,
    INT64,
    INT64,
    st.booleans(),
)
BODIES = st.one_of(
    GROUP_CONFIGS,
    st.builds(
        SubscriptionGroupWrapper,
        st.lists(GROUP_CONFIGS, max_size=3).map(lambda cfgs: {cfg.group_name: cfg for cfg in cfgs}),
        VERSIONS,
    ),
    st.builds(
        HeartbeatData,
        TEXT,
        st.lists(st.builds(ProducerData, NAMES), max_size=3),
        st.lists(
            st.builds(
                ConsumerData,
                NAMES,
                st.sampled_from(ConsumeType),
                st.sampled_from(MessageModel),
                st.sampled_from(ConsumeFromWhere),
                st.lists(SUBSCRIPTIONS, max_size=3),
                st.booleans(),
            ),
            max_size=3,
        ),
    ),
    st.builds(LockBatchRequestBody, NAMES, TEXT, st.lists(MESSAGE_QUEUES, max_size=4)),
    st.builds(LockBatchResponseBody, st.lists(MESSAGE_QUEUES, max_size=4)),
    st.builds(CheckClientRequestBody, TEXT, NAMES, st.none() | SUBSCRIPTIONS),
    st.builds(RegisterBrokerBody, WRAPPERS, st.lists(TEXT, max_size=3)),
    st.builds(
        TopicRouteData,
        st.lists(st.builds(QueueData, TEXT, COUNT, COUNT, INT32, INT32), max_size=3),
        st.lists(BROKER_DATAS, max_size=3),
        st.none() | TEXT,
        st.dictionaries(TEXT, st.lists(TEXT, max_size=2), max_size=2),
    ),
    st.builds(
        ClusterInfo,
        st.dictionaries(TEXT, BROKER_DATAS, max_size=2),
        st.dictionaries(TEXT, st.lists(TEXT, max_size=3).map(sorted), max_size=2),
    ),
    st.builds(KVTable, st.dictionaries(TEXT, TEXT, max_size=3)),
    st.builds(TopicList, st.lists(TEXT, max_size=3), st.none() | TEXT),
    VERSIONS,
    WRAPPERS,
)


@given(BODIES)
def test_round_trip_through_fastjson_text(body: Any) -> None:
    assert type(body).from_json(fastjson.loads(fastjson.dumps(body))) == body
    assert type(body).from_json(fastjson.loads(fastjson.dumps_standard(body))) == body


@pytest.mark.parametrize("text", [b'{"a":1_000}', b'{"a":nan}', b'{"a":Infinity}', b'{"a":-}', b'{"a":1.}'])
def test_fastjson_reads_only_json_numbers(text: bytes) -> None:
    with pytest.raises(fastjson.FastJsonError, match="bad token"):
        fastjson.loads(text)
