"""DefaultRequestProcessor: the name server's request handlers (RocketMQ 4.9's DefaultRequestProcessor).

Bodies are written as Java's fastjson writes them (integer map keys unquoted), except the route of
GET_ROUTEINFO_BY_TOPIC for clients that ask for standard JSON.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from gateway.config import ConfigError, UpdateRefused, properties_to_string
from gateway.persist import SetAside, SetAsideMemo
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicList,
)
from gateway.remoting.codes import VERSION_4_9_4, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import Handler
from gateway.remoting.headers import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    HeaderError,
    KVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from gateway.remoting.message import body_crc
from gateway.remoting.names import topic_problem

from .config import NamesrvConfig, update_namesrv_config
from .kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from .routes import RouteInfoManager

log = Logger()

# FAQUrl.suggestTodo(APPLY_TOPIC_URL), which Java appends to the "no route" remark.
_APPLY_TOPIC_TIP = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

_INT = struct.Struct(">i")


def decode_register_broker_body(data: bytes, compressed: bool) -> tuple[RegisterBrokerBody, SetAside]:
    """RegisterBrokerBody from JSON, or from the zlib form brokers send with ``compressedRegister=true``; the
    topics under names this server refuses (4.9.8 allowed them: a dotted group's retry topic, say) are left
    out of it and come back set aside, the rest of the body is checked as the codec checks it.

    The compressed form: int32 length + DataVersion JSON; int32 topic count; per topic int32 length +
    ``"name readQ writeQ perm FILTER_TYPE"``; int32 length + JSON array of filter servers.
    """
    obj = _uncompressed_register_body(data) if compressed else fastjson.loads(data)
    wrapper = obj.get("topicConfigSerializeWrapper") if isinstance(obj, dict) else None
    if not isinstance(wrapper, dict):
        return RegisterBrokerBody.from_json(obj), SetAside()
    table, aside = SetAside.split_named(wrapper.get("topicConfigTable"), "topicName", topic_problem)
    legal = {**obj, "topicConfigSerializeWrapper": {**wrapper, "topicConfigTable": table}}
    return RegisterBrokerBody.from_json(legal), aside


def _uncompressed_register_body(data: bytes) -> dict[str, Any]:
    """The compressed RegisterBrokerBody as the JSON form's object, read as that form is."""
    raw = zlib.decompress(data)
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (length,) = _INT.unpack_from(raw, pos)
        if length < 0 or pos + 4 + length > len(raw):
            raise ValueError("compressed RegisterBrokerBody is truncated")
        pos += 4 + length
        return raw[pos - length : pos]

    data_version = fastjson.loads(chunk())
    (count,) = _INT.unpack_from(raw, pos)
    pos += 4
    keys = ("topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType")
    table = {}
    for _ in range(count):
        parts = chunk().decode().split(" ")
        # TopicConfig.decode ignores anything but exactly five fields.
        if len(parts) == 5:
            table[parts[0]] = dict(zip(keys, parts, strict=True))
    wrapper = {"dataVersion": data_version, "topicConfigTable": table}
    return {"topicConfigSerializeWrapper": wrapper, "filterServerList": fastjson.loads(chunk())}


class DefaultRequestProcessor:
    """Handlers for every name-server request code; register them with ``dispatcher.register_all(handlers())``."""

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager) -> None:
        self.config = config
        self.routes = routes
        self.kv = kv
        # The topic names each broker address registered that this server refuses, to warn when they change.
        self._refused_topics = SetAsideMemo()

    def handlers(self) -> dict[int, Handler]:
        """Request code → handler."""
        return {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.QUERY_DATA_VERSION: self.query_broker_topic_config,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list(self.routes.get_all_topic_list),
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._topic_list(self.routes.get_system_topic_list),
            RequestCode.GET_UNIT_TOPIC_LIST: self._topic_list(self.routes.get_unit_topics),
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self._topic_list(self.routes.get_has_unit_sub_topic_list),
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self._topic_list(
                self.routes.get_has_unit_sub_un_unit_topic_list
            ),
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }

    # -- KV config

    def put_kv_config(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """PUT_KV_CONFIG: set a value (persisted at once)."""
        header = KVConfigRequestHeader.decode(request.ext_fields)
        if header.value is None:
            # PutKVConfigRequestHeader declares value @CFNotNull.
            raise HeaderError("the custom field <value> is null")
        self.kv.put_kv_config(header.namespace, header.key, header.value)
        return request.response()

    def get_kv_config(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_KV_CONFIG: header ``value``, or QUERY_NOT_FOUND."""
        header = KVConfigRequestHeader.decode(request.ext_fields)
        value = self.kv.get_kv_config(header.namespace, header.key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
                ext_fields={},
            )
        return request.response(ext_fields=GetKVConfigResponseHeader(value).encode())

    def delete_kv_config(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """DELETE_KV_CONFIG."""
        header = KVConfigRequestHeader.decode(request.ext_fields)
        self.kv.delete_kv_config(header.namespace, header.key)
        return request.response()

    def get_kv_list_by_namespace(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_KVLIST_BY_NAMESPACE: a KVTable, or QUERY_NOT_FOUND for an unknown namespace."""
        header = GetKVListByNamespaceRequestHeader.decode(request.ext_fields)
        table = self.kv.get_kv_list_by_namespace(header.namespace)
        if table is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}")
        return request.response(body=fastjson.dumps(KVTable(table)))

    # -- brokers

    def register_broker(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        """REGISTER_BROKER: reply masterAddr/haServerAddr (slaves) and the ORDER_TOPIC_CONFIG KVTable."""
        header = RegisterBrokerRequestHeader.decode(request.ext_fields)
        if header.body_crc32 != 0 and body_crc(request.body) != header.body_crc32:
            log.warn("receive registerBroker request, crc32 not match, from {peer}", peer=channel.peer)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if request.body:
            try:
                body, refused = decode_register_broker_body(request.body, header.compressed)
            except Exception as e:  # Java: any decode failure is a RemotingCommandException
                return request.response(ResponseCode.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}")
        else:
            body = RegisterBrokerBody(TopicConfigSerializeWrapper(data_version=DataVersion(timestamp=0, counter=0)))
            refused = SetAside()
        self._warn_refused_topics(header.broker_name, header.broker_addr, refused)
        result = self.routes.register_broker(
            header.cluster_name,
            header.broker_addr,
            header.broker_name,
            header.broker_id,
            header.ha_server_addr,
            body.topic_config_serialize_wrapper,
            body.filter_server_list,
            channel,
        )
        order_topic_config = self.kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.response(
            ext_fields=RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr).encode(),
            body=fastjson.dumps(KVTable(order_topic_config)) if order_topic_config is not None else b"",
        )

    def _warn_refused_topics(self, broker_name: str, broker_addr: str, refused: SetAside) -> None:
        """One warning naming the topics a broker registered under names this server refuses, again only when
        they change (brokers register every 30 s)."""
        if self._refused_topics.changed(broker_addr, refused):
            log.warn(
                "broker {name} at {addr} registered {count} {what} under names this NameServer refuses, left out "
                "of its routes: {topics}",
                name=broker_name,
                addr=broker_addr,
                count=len(refused.reasons),
                what="topic" if len(refused.reasons) == 1 else "topics",
                topics=refused.described(),
            )

    def unregister_broker(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_BROKER."""
        header = UnRegisterBrokerRequestHeader.decode(request.ext_fields)
        self.routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return request.response()

    def query_broker_topic_config(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """QUERY_DATA_VERSION: did the broker's topics change? An unchanged answer also counts as a heartbeat."""
        header = QueryDataVersionRequestHeader.decode(request.ext_fields)
        # Java compares with null when there is no body, which always reads as "changed".
        sent = DataVersion.from_json(fastjson.loads(request.body)) if request.body else None
        changed = sent is None or self.routes.is_broker_topic_config_changed(header.broker_addr, sent)
        if not changed:
            self.routes.update_broker_info_update_timestamp(header.broker_addr)
        stored = self.routes.query_broker_topic_config(header.broker_addr)
        return request.response(
            ext_fields=QueryDataVersionResponseHeader(changed).encode(),
            body=fastjson.dumps(stored) if stored is not None else b"",
        )

    # -- routes and admin

    def get_route_info_by_topic(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC: the TopicRouteData, or TOPIC_NOT_EXIST."""
        header = GetRouteInfoRequestHeader.decode(request.ext_fields)
        route = self.routes.pick_up_topic_route_data(header.topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}{_APPLY_TOPIC_TIP}",
            )
        if self.config.orderMessageEnable:
            route.order_topic_conf = self.kv.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, header.topic)
        # Legal JSON from 4.9.4 on or on request; older clients (C++ sends 63) may read only fastjson's {0:...}.
        standard = request.version >= VERSION_4_9_4 or header.accept_standard_json_only
        return request.response(body=fastjson.dumps_standard(route) if standard else fastjson.dumps(route))

    def get_broker_cluster_info(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO: the ClusterInfo."""
        return request.response(body=fastjson.dumps(self.routes.get_all_cluster_info()))

    def wipe_write_perm_of_broker(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER: header ``wipeTopicCount``."""
        header = BrokerNameRequestHeader.decode(request.ext_fields)
        count = self.routes.wipe_write_perm_of_broker(header.broker_name)
        log.info(
            "wipe write perm of broker[{name}], client: {peer}, {count}",
            name=header.broker_name,
            peer=channel.peer,
            count=count,
        )
        return request.response(ext_fields=WipeWritePermOfBrokerResponseHeader(count).encode())

    def add_write_perm_of_broker(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER: header ``addTopicCount``."""
        header = BrokerNameRequestHeader.decode(request.ext_fields)
        count = self.routes.add_write_perm_of_broker(header.broker_name)
        log.info(
            "add write perm of broker[{name}], client: {peer}, {count}",
            name=header.broker_name,
            peer=channel.peer,
            count=count,
        )
        return request.response(ext_fields=AddWritePermOfBrokerResponseHeader(count).encode())

    def delete_topic_in_namesrv(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV, optionally limited to ``clusterName``."""
        header = DeleteTopicFromNamesrvRequestHeader.decode(request.ext_fields)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return request.response()

    def get_topics_by_cluster(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER: a TopicList."""
        header = GetTopicsByClusterRequestHeader.decode(request.ext_fields)
        return request.response(body=fastjson.dumps(self.routes.get_topics_by_cluster(header.cluster)))

    @staticmethod
    def _topic_list(query: Callable[[], TopicList]) -> Handler:
        """A handler answering a header-less request with the TopicList ``query()`` returns."""

        def handle(_channel: Any, request: RemotingCommand) -> RemotingCommand:
            return request.response(body=fastjson.dumps(query()))

        return handle

    # -- name server settings

    def update_config(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG: properties text; black-listed keys get NO_PERMISSION, unknown ones
        INVALID_PARAMETER, and nothing changes unless every key is accepted."""
        log.info("updateConfig called by {peer}", peer=channel.peer)
        if request.body:
            try:
                update_namesrv_config(self.config, request.body)
            except UpdateRefused as e:
                return request.response(e.code, e.remark)
            except (OSError, ConfigError) as e:
                log.error("persist {path} failed: {error}", path=self.config.configStorePath, error=e)
                return request.response(ResponseCode.SYSTEM_ERROR, "config updated but not persisted")
        return request.response()

    def get_config(self, _channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG: every setting as Java's plain ``key=value`` lines (an answer, never written to disk)."""
        return request.response(body=properties_to_string(self.config.to_properties()).encode())
