"""Custom headers (extFields) declared as data: each field names its wire key, type and whether it is required.

One routine converts in each direction, following Java's rules: every value travels as a string;
ints and longs parse as decimals, booleans are true only for "true" (any case); a missing required
field (``@CFNotNull``) is an error answered with SYSTEM_ERROR; unknown keys are ignored.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Self

from . import codec
from .names import GROUP_MAX_LENGTH, TOPIC_MAX_LENGTH, check_group, check_topic


class HeaderError(Exception):
    """A required header field is missing (Java's RemotingCommandException)."""


class Topic(str):
    """Header field kind: a topic name, checked as it is decoded (:func:`gateway.remoting.names.check_topic`)."""


class Group(str):
    """Header field kind: a group name, checked as it is decoded (:func:`gateway.remoting.names.check_group`)."""


def wire(name: str, kind: type = str, *, required: bool = False, default: Any = None) -> Any:
    """Declare a header field: wire key, kind (str, int, bool, Topic or Group), required flag."""
    return field(default=default, metadata={"wire": name, "kind": kind, "required": required})


def _to_bool(v: str) -> bool:
    return v.lower() == "true"


_INT_RE = re.compile(r"[+-]?[0-9]+")


def _to_int(v: str) -> int:
    # Java's Long.parseLong: plain decimal digits within 64 bits, nothing else.
    if not _INT_RE.fullmatch(v):
        raise ValueError(v)
    n = int(v)
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(v)
    return n


_PARSERS = {str: str, int: _to_int, bool: _to_bool, Topic: check_topic, Group: check_group}
# The C codec's numbers for the kinds (gateway/remoting/_codec.c).
_KINDS = {str: 0, _to_int: 1, _to_bool: 2, check_topic: 3, check_group: 4}
_LEGAL_NAME = re.compile(r"[%|a-zA-Z0-9_-]+").fullmatch
# Names already found legal: the same few topics and groups arrive on every request, and a set lookup is
# cheaper than the check. Bounded: a client sending endless new names only empties them.
KNOWN_TOPICS: set[str] = set()
KNOWN_GROUPS: set[str] = set()
_KNOWN_MAX = 65536


def _remember(known: set[str], name: str) -> None:
    if len(known) >= _KNOWN_MAX:
        known.clear()
    known.add(name)


def _to_int_or_none(v: str) -> int | None:
    try:
        return _to_int(v)
    except ValueError:
        return None  # Java logs and leaves the field unset


def _check_name(kind: int, name: str) -> None:
    """A topic (kind 3) or group (4) name not seen before: raise with Apache's remark if illegal, else remember it."""
    topic = kind == _KINDS[check_topic]
    if len(name) > (TOPIC_MAX_LENGTH if topic else GROUP_MAX_LENGTH) or _LEGAL_NAME(name) is None:
        (check_topic if topic else check_group)(name)
    _remember(KNOWN_TOPICS if topic else KNOWN_GROUPS, name)


if (_c_codec := codec.accelerator(loaded=True)) is not None:
    _c_codec.setup_headers(
        header_error=HeaderError,
        to_int_or_none=_to_int_or_none,
        is_true=_to_bool,
        check_name=_check_name,
        known_topics=KNOWN_TOPICS,
        known_groups=KNOWN_GROUPS,
    )


def ext_value(v: Any) -> str:
    """A header value as extFields carry it: Java's toString, booleans lower-case."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


class CommandHeader:
    """Base of header dataclasses; subclasses declare fields with :func:`wire`."""

    # (attribute, wire key, parser, required, default) and the generated decoder — built on first use.
    _spec: ClassVar[tuple[tuple[str, str, Any, bool, Any], ...]]
    _decoder: ClassVar[Any]

    @classmethod
    def _fields_spec(cls, names: dict[str, str] | None = None) -> tuple[tuple[str, str, Any, bool, Any], ...]:
        spec = []
        for f in fields(cls):  # type: ignore[arg-type]
            md = f.metadata
            key = names.get(f.name, md["wire"]) if names else md["wire"]
            default = f.default if f.default is not MISSING else None
            spec.append((f.name, key, _PARSERS[md["kind"]], md["required"], default))
        return tuple(spec)

    @classmethod
    def _compile_decoder(cls, spec: tuple[tuple[str, str, Any, bool, Any], ...]) -> Any:
        """The decoder for ``spec``, made once (headers are decoded on every request: the send hot path): the C
        codec's when it is in use, with the generated Python one for the values C hands back (not str)."""
        python = cls._python_decoder(spec)
        c = codec.accelerator()
        if c is None:
            return python
        c_spec = cls._c_spec(spec)
        decode_fields = c.decode_fields

        def decode(ext: dict[str, str] | None) -> Any:
            values = decode_fields(ext, c_spec)
            return python(ext) if values is NotImplemented else cls(*values)

        return decode

    @staticmethod
    def _c_spec(spec: tuple[tuple[str, str, Any, bool, Any], ...]) -> tuple[tuple[str, int, bool, Any, str], ...]:
        """``spec`` as the C codec's decode_fields takes it: (key, kind, required, default, message if missing)."""
        return tuple(
            (key, _KINDS[parse], required, default, f"the custom field <{attr}> is null")
            for attr, key, parse, required, default in spec
        )

    @classmethod
    def _python_decoder(cls, spec: tuple[tuple[str, str, Any, bool, Any], ...]) -> Any:
        """Generate the Python decoder for ``spec`` (the reference, and the fallback of the C one)."""
        lines = ["def decode(ext):", "    g = (ext or {}).get"]
        env: dict[str, Any] = {
            "HeaderError": HeaderError,
            "_to_int": _to_int,
            "cls": cls,
            "check_topic": check_topic,
            "check_group": check_group,
            "legal": _LEGAL_NAME,
            "known_topics": KNOWN_TOPICS,
            "known_groups": KNOWN_GROUPS,
            "remember": _remember,
        }
        args = []
        for i, (attr, key, parse, required, default) in enumerate(spec):
            v = f"v{i}"
            env[f"d{i}"] = default
            lines.append(f"    {v} = g({key!r})")
            if parse is _to_int:
                lines += [
                    f"    if {v} is not None:",
                    f"        if {v}.isascii() and {v}.isdigit() and len({v}) < 19:",
                    f"            {v} = int({v})",
                    "        else:",
                    "            try:",
                    f"                {v} = _to_int({v})",
                    "            except ValueError:",
                    f"                {v} = None  # Java logs and leaves the field unset",
                ]
            elif parse is _to_bool:
                lines.append(f"    if {v} is not None: {v} = {v}.lower() == 'true'")
            elif parse is check_topic or parse is check_group:
                # The common case inline (send hot path); the checker raises with Apache's remark otherwise.
                limit = TOPIC_MAX_LENGTH if parse is check_topic else GROUP_MAX_LENGTH
                if not required:
                    lines.append(f"    if {v} == '': {v} = None  # optional and blank: absent")
                known = "known_topics" if parse is check_topic else "known_groups"
                lines += [
                    f"    if {v} is not None and {v} not in {known}:",
                    f"        if len({v}) > {limit} or legal({v}) is None:",
                    f"            {parse.__name__}({v})",
                    f"        remember({known}, {v})",
                ]
            lines.append(f"    if {v} is None:")
            if required:
                lines.append(f"        raise HeaderError('the custom field <{attr}> is null')")
            else:
                lines.append(f"        {v} = d{i}")
            args.append(f"{attr}={v}")
        lines.append(f"    return cls({', '.join(args)})")
        exec("\n".join(lines), env)
        return env["decode"]

    @classmethod
    def decode(cls, ext: dict[str, str] | None) -> Self:
        """Build the header from a command's extFields."""
        decoder = cls.__dict__.get("_decoder")
        if decoder is None:
            decoder = cls._compile_decoder(cls._fields_spec())
            cls._decoder = decoder
        return decoder(ext)

    def encode(self) -> dict[str, str]:
        """extFields for this header: non-null fields as strings."""
        spec = type(self).__dict__.get("_spec")
        if spec is None:
            spec = self._fields_spec()
            type(self)._spec = spec
        out = {}
        for attr, key, _parse, _required, _default in spec:
            v = getattr(self, attr)
            if v is not None:
                out[key] = ext_value(v)
        return out


# ---------------------------------------------------------------------------- send


@dataclass(slots=True)
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10); SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) carry it with one-letter keys."""

    producer_group: str = wire("producerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    default_topic: str = wire("defaultTopic", Topic, required=True)
    default_topic_queue_nums: int = wire("defaultTopicQueueNums", int, required=True)
    queue_id: int = wire("queueId", int, required=True)
    sys_flag: int = wire("sysFlag", int, required=True)
    born_timestamp: int = wire("bornTimestamp", int, required=True)
    flag: int = wire("flag", int, required=True)
    properties: str | None = wire("properties")
    reconsume_times: int | None = wire("reconsumeTimes", int)
    unit_mode: bool = wire("unitMode", bool, default=False)
    max_reconsume_times: int | None = wire("maxReconsumeTimes", int)
    batch: bool = wire("batch", bool, default=False)
    bname: str | None = wire("bname")

    V2_NAMES: ClassVar[dict[str, str]] = {
        "producer_group": "a",
        "topic": "b",
        "default_topic": "c",
        "default_topic_queue_nums": "d",
        "queue_id": "e",
        "sys_flag": "f",
        "born_timestamp": "g",
        "flag": "h",
        "properties": "i",
        "reconsume_times": "j",
        "unit_mode": "k",
        "max_reconsume_times": "l",
        "batch": "m",
        "bname": "n",
    }
    _decoder_v2: ClassVar[Any]

    @classmethod
    def decode_v2(cls, ext: dict[str, str] | None) -> SendMessageRequestHeader:
        """From SendMessageRequestHeaderV2's one-letter keys."""
        decoder = cls.__dict__.get("_decoder_v2")
        if decoder is None:
            decoder = cls._compile_decoder(cls._fields_spec(cls.V2_NAMES))
            cls._decoder_v2 = decoder
        return decoder(ext)

    def encode_v2(self) -> dict[str, str]:
        """extFields with one-letter keys, as Java producers send."""
        names = self.V2_NAMES
        out = {}
        for attr, key in names.items():
            v = getattr(self, attr)
            if v is not None:
                out[key] = ext_value(v)
        return out


@dataclass(slots=True)
class SendMessageResponseHeader(CommandHeader):
    msg_id: str = wire("msgId", required=True)
    queue_id: int = wire("queueId", int, required=True)
    queue_offset: int = wire("queueOffset", int, required=True)
    transaction_id: str | None = wire("transactionId")
    recall_handle: str | None = wire("recallHandle")  # 5.3: of a delayed message


# ---------------------------------------------------------------------------- pull


@dataclass(slots=True)
class PullMessageRequestHeader(CommandHeader):
    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    queue_offset: int = wire("queueOffset", int, required=True)
    max_msg_nums: int = wire("maxMsgNums", int, required=True)
    sys_flag: int = wire("sysFlag", int, required=True)
    commit_offset: int = wire("commitOffset", int, required=True)
    suspend_timeout_millis: int = wire("suspendTimeoutMillis", int, required=True)
    subscription: str | None = wire("subscription")
    sub_version: int = wire("subVersion", int, required=True)
    expression_type: str | None = wire("expressionType")
    bname: str | None = wire("bname")


@dataclass(slots=True)
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: int = wire("suggestWhichBrokerId", int, required=True)
    next_begin_offset: int = wire("nextBeginOffset", int, required=True)
    min_offset: int = wire("minOffset", int, required=True)
    max_offset: int = wire("maxOffset", int, required=True)


class PullSysFlag:
    """Bits of PullMessageRequestHeader.sysFlag."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


# ---------------------------------------------------------------------------- offsets


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    set_zero_if_not_found: bool | None = wire("setZeroIfNotFound", bool)


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    commit_offset: int = wire("commitOffset", int, required=True)


@dataclass(slots=True)
class TopicQueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)


@dataclass(slots=True)
class SearchOffsetRequestHeader(CommandHeader):
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    timestamp: int = wire("timestamp", int, required=True)


@dataclass(slots=True)
class OffsetResponseHeader(CommandHeader):
    """Responses of QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int = wire("offset", int, required=True)


@dataclass(slots=True)
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: int = wire("timestamp", int, required=True)


# ---------------------------------------------------------------------------- clients


@dataclass(slots=True)
class UnregisterClientRequestHeader(CommandHeader):
    client_id: str = wire("clientID", required=True)
    producer_group: str | None = wire("producerGroup", Group)
    consumer_group: str | None = wire("consumerGroup", Group)


@dataclass(slots=True)
class ConsumerGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_CONNECTION_LIST."""

    consumer_group: str = wire("consumerGroup", Group, required=True)


# ---------------------------------------------------------------------------- admin


@dataclass(slots=True)
class CreateTopicRequestHeader(CommandHeader):
    topic: str = wire("topic", Topic, required=True)
    default_topic: str = wire("defaultTopic", Topic, required=True)
    read_queue_nums: int = wire("readQueueNums", int, required=True)
    write_queue_nums: int = wire("writeQueueNums", int, required=True)
    perm: int = wire("perm", int, required=True)
    topic_filter_type: str = wire("topicFilterType", required=True)
    topic_sys_flag: int | None = wire("topicSysFlag", int)
    order: bool = wire("order", bool, default=False)


@dataclass(slots=True)
class TopicRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO, GET_ROUTEINFO_BY_TOPIC, and
    GET_TOPIC_CONFIG (whose ``lo`` asks for the static-topic queue mapping, which this broker never has)."""

    topic: str = wire("topic", Topic, required=True)


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str | None = wire("topic", Topic)


@dataclass(slots=True)
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (admin to broker) and RESET_CONSUMER_CLIENT_OFFSET (broker to client)."""

    topic: str = wire("topic", Topic, required=True)
    group: str = wire("group", Group, required=True)
    timestamp: int = wire("timestamp", int, required=True)
    is_force: bool = wire("isForce", bool, default=False)


@dataclass(slots=True)
class GetConsumerStatusRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS and GET_CONSUMER_STATUS_FROM_CLIENT."""

    topic: str = wire("topic", Topic, required=True)
    group: str = wire("group", Group, required=True)
    client_addr: str | None = wire("clientAddr")


@dataclass(slots=True)
class QueryConsumeTimeSpanRequestHeader(CommandHeader):
    topic: str = wire("topic", Topic, required=True)
    group: str = wire("group", Group, required=True)


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    consumer_group: str = wire("consumerGroup", Group, required=True)
    client_id: str = wire("clientId", required=True)
    jstack_enable: bool = wire("jstackEnable", bool, default=False)


@dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(CommandHeader):
    consumer_group: str = wire("consumerGroup", Group, required=True)
    client_id: str | None = wire("clientId")
    msg_id: str | None = wire("msgId")
    broker_name: str | None = wire("brokerName")


@dataclass(slots=True)
class QueryCorrectionOffsetHeader(CommandHeader):
    """QUERY_CORRECTION_OFFSET: ``filterGroups`` is a comma-separated list of groups to leave out."""

    compare_group: str = wire("compareGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    filter_groups: str | None = wire("filterGroups")


@dataclass(slots=True)
class CloneGroupOffsetRequestHeader(CommandHeader):
    src_group: str = wire("srcGroup", Group, required=True)
    dest_group: str = wire("destGroup", Group, required=True)
    topic: str | None = wire("topic", Topic)
    offline: bool = wire("offline", bool, default=False)


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(CommandHeader):
    stats_name: str = wire("statsName", required=True)
    stats_key: str = wire("statsKey", required=True)


@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(CommandHeader):
    """GET_BROKER_CONSUME_STATS."""

    is_order: bool = wire("isOrder", bool, required=True)


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(CommandHeader):
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    index: int = wire("index", int, required=True)
    count: int = wire("count", int, required=True)
    consumer_group: str | None = wire("consumerGroup", Group)


@dataclass(slots=True)
class ResumeCheckHalfMessageRequestHeader(CommandHeader):
    msg_id: str | None = wire("msgId")


# ---------------------------------------------------------------------------- name server


@dataclass(slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    broker_name: str = wire("brokerName", required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    cluster_name: str = wire("clusterName", required=True)
    ha_server_addr: str = wire("haServerAddr", required=True)
    broker_id: int = wire("brokerId", int, required=True)
    compressed: bool = wire("compressed", bool, default=False)
    body_crc32: int = wire("bodyCrc32", int, default=0)


@dataclass(slots=True)
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = wire("haServerAddr")
    master_addr: str | None = wire("masterAddr")


@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(CommandHeader):
    broker_name: str = wire("brokerName", required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    cluster_name: str = wire("clusterName", required=True)
    broker_id: int = wire("brokerId", int, required=True)


@dataclass(slots=True)
class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool = wire("changed", bool, required=True)


@dataclass(slots=True)
class GetRouteInfoRequestHeader(CommandHeader):
    topic: str = wire("topic", Topic, required=True)
    accept_standard_json_only: bool = wire("acceptStandardJsonOnly", bool, default=False)


@dataclass(slots=True)
class KVConfigRequestHeader(CommandHeader):
    """PUT_KV_CONFIG (value required there), GET_KV_CONFIG, DELETE_KV_CONFIG."""

    namespace: str = wire("namespace", required=True)
    key: str = wire("key", required=True)
    value: str | None = wire("value")


@dataclass(slots=True)
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = wire("value")


@dataclass(slots=True)
class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: str = wire("namespace", required=True)


@dataclass(slots=True)
class BrokerNameRequestHeader(CommandHeader):
    """WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER."""

    broker_name: str = wire("brokerName", required=True)


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: int = wire("wipeTopicCount", int, required=True)


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: int = wire("addTopicCount", int, required=True)


@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    topic: str = wire("topic", Topic, required=True)
    cluster_name: str | None = wire("clusterName")


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str = wire("cluster", required=True)


@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    group_name: str = wire("groupName", Group, required=True)
    remove_offset: bool = wire("removeOffset", bool, default=False)


@dataclass(slots=True)
class GetSubscriptionGroupConfigRequestHeader(CommandHeader):
    """GET_SUBSCRIPTIONGROUP_CONFIG (5.x)."""

    group: str = wire("group", Group, required=True)


@dataclass(slots=True)
class ProducerGroupRequestHeader(CommandHeader):
    """GET_PRODUCER_CONNECTION_LIST."""

    producer_group: str = wire("producerGroup", Group, required=True)


@dataclass(slots=True)
class QueryDataVersionRequestHeader(CommandHeader):
    """QUERY_DATA_VERSION (322); the body is the broker's DataVersion."""

    broker_name: str = wire("brokerName", required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    cluster_name: str = wire("clusterName", required=True)
    broker_id: int = wire("brokerId", int, required=True)


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    """CONSUMER_SEND_MSG_BACK (36): a consumed message goes back to the group's retry topic."""

    offset: int = wire("offset", int, required=True)
    group: str = wire("group", Group, required=True)
    delay_level: int = wire("delayLevel", int, required=True)
    origin_msg_id: str | None = wire("originMsgId")
    origin_topic: str | None = wire("originTopic", Topic)
    unit_mode: bool = wire("unitMode", bool, default=False)
    max_reconsume_times: int | None = wire("maxReconsumeTimes", int)
    bname: str | None = wire("bname")


# ---------------------------------------------------------------------------- transactions and request/reply


@dataclass(slots=True)
class EndTransactionRequestHeader(CommandHeader):
    """END_TRANSACTION (37), oneway: commit (8), roll back (12) or leave (0) a half message."""

    producer_group: str = wire("producerGroup", Group, required=True)
    tran_state_table_offset: int = wire("tranStateTableOffset", int, required=True)
    commit_log_offset: int = wire("commitLogOffset", int, required=True)
    commit_or_rollback: int = wire("commitOrRollback", int, required=True)
    from_transaction_check: bool = wire("fromTransactionCheck", bool, default=False)
    msg_id: str = wire("msgId", required=True)
    transaction_id: str | None = wire("transactionId")
    bname: str | None = wire("bname")


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    """CHECK_TRANSACTION_STATE (39), broker → producer; the body is the half message."""

    tran_state_table_offset: int = wire("tranStateTableOffset", int, required=True)
    commit_log_offset: int = wire("commitLogOffset", int, required=True)
    msg_id: str | None = wire("msgId")
    transaction_id: str | None = wire("transactionId")
    offset_msg_id: str | None = wire("offsetMsgId")
    bname: str | None = wire("bname")


@dataclass(slots=True)
class ReplyMessageRequestHeader(CommandHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326), broker → requester; the body is the reply's body."""

    producer_group: str = wire("producerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    default_topic: str = wire("defaultTopic", Topic, required=True)
    default_topic_queue_nums: int = wire("defaultTopicQueueNums", int, required=True)
    queue_id: int = wire("queueId", int, required=True)
    sys_flag: int = wire("sysFlag", int, required=True)
    born_timestamp: int = wire("bornTimestamp", int, required=True)
    flag: int = wire("flag", int, required=True)
    born_host: str = wire("bornHost", required=True)
    store_host: str = wire("storeHost", required=True)
    store_timestamp: int = wire("storeTimestamp", int, required=True)
    properties: str | None = wire("properties")
    reconsume_times: int | None = wire("reconsumeTimes", int)
    unit_mode: bool = wire("unitMode", bool, default=False)


# ---------------------------------------------------------------------------- query / view


@dataclass(slots=True)
class QueryMessageRequestHeader(CommandHeader):
    """QUERY_MESSAGE (12); extField ``_UNIQUE_KEY_QUERY`` "true" marks ``key`` as a UNIQ_KEY."""

    topic: str = wire("topic", Topic, required=True)
    key: str = wire("key", required=True)
    max_num: int = wire("maxNum", int, required=True)
    begin_timestamp: int = wire("beginTimestamp", int, required=True)
    end_timestamp: int = wire("endTimestamp", int, required=True)


@dataclass(slots=True)
class QueryMessageResponseHeader(CommandHeader):
    """Answer to QUERY_MESSAGE; the body is the records found."""

    index_last_update_timestamp: int = wire("indexLastUpdateTimestamp", int, required=True)
    index_last_update_phyoffset: int = wire("indexLastUpdatePhyoffset", int, required=True)


@dataclass(slots=True)
class ViewMessageRequestHeader(CommandHeader):
    """VIEW_MESSAGE_BY_ID (33): the commitlog offset of an offsetMsgId."""

    offset: int = wire("offset", int, required=True)


# ---------------------------------------------------------------------------- pop (5.x)


@dataclass(slots=True)
class PopMessageRequestHeader(CommandHeader):
    """POP_MESSAGE (200050): ``queueId`` -1 pops from any queue; ``initMode`` (ConsumeInitMode) places a group
    without an offset: 0 (MIN) at the queue's start, 1 (MAX) at its end; ``expType`` TAG or SQL92."""

    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    max_msg_nums: int = wire("maxMsgNums", int, required=True)
    invisible_time: int = wire("invisibleTime", int, required=True)
    poll_time: int = wire("pollTime", int, required=True)
    born_time: int = wire("bornTime", int, required=True)
    init_mode: int = wire("initMode", int, required=True)
    exp_type: str | None = wire("expType")
    exp: str | None = wire("exp")
    order: bool = wire("order", bool, default=False)
    attempt_id: str | None = wire("attemptId")
    bname: str | None = wire("bname")


@dataclass(slots=True)
class PopMessageResponseHeader(CommandHeader):
    """Answer to POP_MESSAGE; ``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo`` as ExtraInfoUtil builds them."""

    pop_time: int = wire("popTime", int, required=True)
    invisible_time: int = wire("invisibleTime", int, required=True)
    revive_qid: int = wire("reviveQid", int, required=True)
    rest_num: int = wire("restNum", int, required=True)
    start_offset_info: str | None = wire("startOffsetInfo")
    msg_offset_info: str | None = wire("msgOffsetInfo")
    order_count_info: str | None = wire("orderCountInfo")


@dataclass(slots=True)
class AckMessageRequestHeader(CommandHeader):
    """ACK_MESSAGE (200051): ``extraInfo`` is the message's POP_CK property, ``offset`` its queue offset."""

    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    extra_info: str = wire("extraInfo", required=True)
    offset: int = wire("offset", int, required=True)
    bname: str | None = wire("bname")


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(CommandHeader):
    """CHANGE_MESSAGE_INVISIBLETIME (200053): the message becomes visible ``invisibleTime`` ms from now."""

    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    extra_info: str = wire("extraInfo", required=True)
    offset: int = wire("offset", int, required=True)
    invisible_time: int = wire("invisibleTime", int, required=True)
    bname: str | None = wire("bname")


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(CommandHeader):
    pop_time: int = wire("popTime", int, required=True)
    invisible_time: int = wire("invisibleTime", int, required=True)
    revive_qid: int = wire("reviveQid", int, required=True)


# ---------------------------------------------------------------------------- pop: peek and long polls (5.x)


@dataclass(slots=True)
class PeekMessageRequestHeader(CommandHeader):
    """PEEK_MESSAGE (200052): up to ``maxMsgNums`` messages from where the group would pop, offsets untouched;
    ``queueId`` -1 reads every queue. Answered with a :class:`PopMessageResponseHeader`."""

    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    max_msg_nums: int = wire("maxMsgNums", int, required=True)
    consumer_group: str = wire("consumerGroup", Group, required=True)
    bname: str | None = wire("bname")


@dataclass(slots=True)
class NotificationRequestHeader(CommandHeader):
    """NOTIFICATION (200054): answer when the group has a message to pop, or after ``pollTime`` ms. The broker
    sets a missing or "0" ``bornTime`` to its own clock, as Java does before decoding."""

    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    poll_time: int = wire("pollTime", int, required=True)
    born_time: int = wire("bornTime", int, required=True)
    order: bool = wire("order", bool, default=False)
    attempt_id: str | None = wire("attemptId")
    bname: str | None = wire("bname")


@dataclass(slots=True)
class NotificationResponseHeader(CommandHeader):
    has_msg: bool = wire("hasMsg", bool, required=True, default=False)
    polling_full: bool = wire("pollingFull", bool, default=False)


@dataclass(slots=True)
class PollingInfoRequestHeader(CommandHeader):
    """POLLING_INFO (200055): how many pops of the group wait on the queue."""

    consumer_group: str = wire("consumerGroup", Group, required=True)
    topic: str = wire("topic", Topic, required=True)
    queue_id: int = wire("queueId", int, required=True)
    bname: str | None = wire("bname")


@dataclass(slots=True)
class PollingInfoResponseHeader(CommandHeader):
    polling_num: int = wire("pollingNum", int, required=True, default=0)


# ---------------------------------------------------------------------------- recall (5.3)


@dataclass(slots=True)
class RecallMessageRequestHeader(CommandHeader):
    """RECALL_MESSAGE (370): the recall handle a delayed message's send answered."""

    topic: str = wire("topic", Topic, required=True)
    recall_handle: str = wire("recallHandle", required=True)
    producer_group: str | None = wire("producerGroup", Group)
    bname: str | None = wire("bname")


@dataclass(slots=True)
class RecallMessageResponseHeader(CommandHeader):
    msg_id: str = wire("msgId", required=True)
