"""MQAdminExt for scripts: the admin requests of mqadmin over blocking connections (no reactor), against
our servers or Apache's, with optional ACL signing and TLS."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gateway.acl.signer import SessionCredentials
from gateway.client.message_id import create_uniq_id
from gateway.remoting import fastjson
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.client import split_addr
from gateway.remoting.codec import ProtocolError
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.errors import NameServerUnreachable
from gateway.remoting.headers import (
    PullMessageRequestHeader,
    PullSysFlag,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from gateway.remoting.message import (
    MessageConst,
    MessageExt,
    decode_offset_message_id,
    decode_records,
    properties_to_string,
)

MASTER_ID = 0


class AdminError(Exception):
    """A request answered with an error code (``code`` and the server's remark)."""

    def __init__(self, code: int, remark: str | None, what: str) -> None:
        super().__init__(f"{what}: CODE: {code} DESC: {remark}")
        self.code = code
        self.remark = remark


def namesrv_addrs(text: str) -> list[str]:
    """The addresses of a name server list (``host:port[;host:port]``); ValueError naming a malformed one."""
    addrs = [check_addr(a.strip()) for a in text.split(";") if a.strip()]
    if not addrs:
        raise ValueError("no name server address (host:port[;host:port])")
    return addrs


def check_addr(addr: str) -> str:
    """``addr`` when it is ``host:port`` (a port of 1 to 65535), else ValueError saying what is wrong."""
    try:
        host, port = split_addr(addr)
    except ValueError:
        host, port = "", 0
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad address {addr!r}: want host:port, e.g. 127.0.0.1:9876")
    return addr


class AdminExt:
    """Admin requests to a cluster found through ``namesrv`` (``host:port[;host:port]``)."""

    def __init__(
        self,
        namesrv: str,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        tls: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.namesrv = namesrv_addrs(namesrv)
        self.sign = SessionCredentials(access_key, secret_key).sign if access_key and secret_key else None
        self.tls = tls
        self.timeout = timeout
        self._conns: dict[str, BlockingConnection] = {}

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> AdminExt:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport

    def call(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """One request to ``addr``; AdminError unless the answer's code is in ``ok``, ConnectionError (naming
        ``addr``) when there is no answer or the peer does not speak RocketMQ's protocol."""
        conn = self._conns.get(addr)
        if conn is None:
            conn = self._conns[addr] = BlockingConnection(addr, self.timeout, self.tls, self.sign)
        try:
            response = conn.invoke(RemotingCommand.request(code, ext or {}, body))
        except ProtocolError as e:  # the connection is closed already
            raise ConnectionError(f"{addr} is not a RocketMQ server (it answered: {e})") from e
        except OSError as e:
            raise ConnectionError(str(e) if addr in str(e) else f"{addr}: {e}") from e
        if response.code not in ok:
            raise AdminError(response.code, response.remark, f"{RequestCode(code).name} to {addr}")
        return response

    def call_namesrv(self, code: int, ext: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> RemotingCommand:
        """A request to the first name server that answers."""
        errors: list[OSError] = []
        for addr in self.namesrv:
            try:
                return self.call(addr, code, ext, ok=ok)
            except OSError as e:
                errors.append(e)
        if len(errors) == 1:  # it names its address already
            raise errors[0]
        raise NameServerUnreachable(self.namesrv, errors[-1]) from errors[-1]

    @staticmethod
    def body(response: RemotingCommand) -> Any:
        return fastjson.loads(response.body) if response.body else {}

    # -- name server

    def cluster_info(self) -> dict[str, Any]:
        return self.body(self.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO))

    def topic_list(self) -> list[str]:
        return sorted(self.body(self.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"])

    def topic_route(self, topic: str) -> dict[str, Any]:
        return self.body(self.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName → master address, of one cluster or all."""
        info = self.cluster_info()
        names = info.get("clusterAddrTable", {}).get(cluster, []) if cluster else info.get("brokerAddrTable", {})
        table = info.get("brokerAddrTable", {})
        return _masters(table.get(name, {}) for name in sorted(names))

    def route_masters(self, topic: str, route: dict[str, Any] | None = None) -> dict[str, str]:
        """brokerName → master address of the brokers that host ``topic`` (from ``route`` when given)."""
        route = route if route is not None else self.topic_route(topic)
        return dict(sorted(_masters(route.get("brokerDatas", [])).items()))

    # -- broker

    def runtime_info(self, addr: str) -> dict[str, str]:
        return self.body(self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO))["table"]

    def broker_config(self, addr: str) -> dict[str, str]:
        text = self.call(addr, RequestCode.GET_BROKER_CONFIG).body.decode()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def update_broker_config(self, addr: str, key: str, value: str) -> None:
        self.call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=f"{key}={value}\n".encode())

    def topic_stats(self, addr: str, topic: str) -> dict[str, Any]:
        return self.body(self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}))["offsetTable"]

    def consume_stats(self, addr: str, group: str, topic: str | None = None) -> dict[str, Any]:
        ext = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        return self.body(self.call(addr, RequestCode.GET_CONSUME_STATS, ext))

    def consumer_running_info(self, addr: str, group: str, client_id: str) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO through the broker at ``addr``: a client's ConsumerRunningInfo (its
        properties, subscriptions, process queues and consume status), as mqadmin consumerStatus shows it."""
        ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
        return self.body(self.call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, ext))

    def broker_consume_stats(self, addr: str) -> dict[str, Any]:
        """GET_BROKER_CONSUME_STATS: every group's ConsumeStats per topic on a broker (ConsumeStatsList)."""
        return self.body(self.call(addr, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))

    def groups_of_topic(self, addr: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO: the groups with offsets of, or subscriptions to, ``topic`` on a broker."""
        return self.body(self.call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))["groupList"]

    def subscription_groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name → SubscriptionGroupConfig, of one broker."""
        return self.body(self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))["subscriptionGroupTable"]

    def consumer_connections(self, addr: str, group: str) -> dict[str, Any]:
        """GET_CONSUMER_CONNECTION_LIST: a group's clients, consume type, model and subscriptions on a broker
        (empty when none is online there)."""
        ext = {"consumerGroup": group}
        response = self.call(
            addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, ext, ok=(0, ResponseCode.CONSUMER_NOT_ONLINE)
        )
        return self.body(response) if response.code == ResponseCode.SUCCESS else {}

    def pull(
        self, addr: str, topic: str, queue_id: int, offset: int, max_nums: int = 32
    ) -> tuple[int, list[MessageExt]]:
        """(next offset, messages) from one queue, read as a consumer group of the tool's own."""
        header = PullMessageRequestHeader(
            consumer_group="TOOLS_CONSUMER",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=PullSysFlag.SUBSCRIPTION,  # the subscription travels with the pull: no heartbeat needed
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
            expression_type="TAG",
        )
        ok = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
              ResponseCode.PULL_OFFSET_MOVED)  # fmt: skip
        response = self.call(addr, RequestCode.PULL_MESSAGE, header.encode(), ok=ok)
        next_offset = int((response.ext_fields or {}).get("nextBeginOffset", offset))
        if response.code != ResponseCode.SUCCESS:
            return next_offset, []
        return next_offset, decode_records(response.body)

    def queue_offsets(self, addr: str, topic: str, queue_id: int) -> tuple[int, int]:
        ext = {"topic": topic, "queueId": str(queue_id)}
        low = int(self.call(addr, RequestCode.GET_MIN_OFFSET, ext).ext_fields["offset"])
        high = int(self.call(addr, RequestCode.GET_MAX_OFFSET, ext).ext_fields["offset"])
        return low, high

    def search_offset(self, addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        ext = SearchOffsetRequestHeader(topic, queue_id, timestamp).encode()
        return int(self.call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext).ext_fields["offset"])

    def messages_in_range(
        self, topic: str, begin: int = 0, end: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> Iterator[MessageExt]:
        """Every message of ``topic`` stored between ``begin`` and ``end`` (ms), queue by queue; ``progress``
        gets (queues done, queues in all)."""
        end = end if end is not None else int(time.time() * 1000) + 60_000
        route = self.topic_route(topic)
        masters = self.route_masters(topic, route)
        queues = [
            (masters[qd["brokerName"]], q)
            for qd in sorted(route.get("queueDatas", []), key=lambda qd: qd["brokerName"])
            if qd["brokerName"] in masters
            for q in range(qd["readQueueNums"])
        ]
        for done, (addr, queue_id) in enumerate(queues):
            low, high = self.queue_offsets(addr, topic, queue_id)
            if begin > 0:
                low = max(low, self.search_offset(addr, topic, queue_id, begin))
            offset = low
            while offset < high:
                next_offset, msgs = self.pull(addr, topic, queue_id, offset)
                for m in msgs:
                    if begin <= m.store_timestamp <= end:
                        yield m
                if next_offset <= offset:
                    break
                offset = next_offset
            if progress is not None:
                progress(done + 1, len(queues))

    def send_message(
        self, topic: str, body: bytes, properties: dict[str, str], queue_id: int = 0, group: str = "TOOLS_PRODUCER"
    ) -> dict[str, Any]:
        """SEND_MESSAGE_V2 of one message to queue ``queue_id`` of the topic's first master, as mqadmin
        sendMessage does; a SendResult row (brokerName, queueId, sendStatus, msgId, offsetMsgId)."""
        masters = self.route_masters(topic)
        if not masters:
            raise ConnectionError(f"no route for topic {topic}")
        name, addr = next(iter(masters.items()))
        msg_id = create_uniq_id()
        props = {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: msg_id, MessageConst.WAIT_STORE_MSG_OK: "true"}
        header = SendMessageRequestHeader(
            producer_group=group,
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=properties_to_string(props | properties),
            reconsume_times=0,
        ).encode_v2()
        ext = self.call(addr, RequestCode.SEND_MESSAGE_V2, header, body).ext_fields or {}
        return {"brokerName": name, "queueId": int(ext.get("queueId", queue_id)), "sendStatus": "SEND_OK",
                "msgId": msg_id, "offsetMsgId": ext.get("msgId")}  # fmt: skip

    def consume_message_directly(self, addr: str, group: str, client_id: str, offset_msg_id: str) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: the broker at ``addr`` hands its message ``offset_msg_id`` to a client of
        ``group`` to consume now; the client's ConsumeMessageDirectlyResult."""
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": offset_msg_id}
        return self.body(self.call(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, ext))

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """A message by its offsetMsgId, from the broker the id names."""
        addr, offset = decode_offset_message_id(offset_msg_id)
        response = self.call(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
        return decode_records(response.body)[0]

    def query_message(self, topic: str, key: str, unique: bool = False, max_num: int = 64) -> list[MessageExt]:
        """Messages of ``topic`` by KEYS (or by UNIQ_KEY with ``unique``) on every broker hosting it."""
        header = QueryMessageRequestHeader(topic, key, max_num, 0, int(time.time() * 1000) + 60_000).encode()
        if unique:
            header["_UNIQUE_KEY_QUERY"] = "true"
        found: list[MessageExt] = []
        for addr in self.route_masters(topic).values():
            response = self.call(addr, RequestCode.QUERY_MESSAGE, header, ok=(0, ResponseCode.QUERY_NOT_FOUND))
            if response.code == ResponseCode.SUCCESS:
                found.extend(decode_records(response.body))
        if unique:
            found = [m for m in found if m.uniq_key == key]
        return found

    def reset_offset(self, addr: str, topic: str, group: str, timestamp: int, force: bool = True) -> dict[int, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET on one broker, which moves the group's online consumers at once:
        queueId → new offset. AdminError CONSUMER_NOT_ONLINE when none is online (then
        :meth:`rollback_offset`, as mqadmin does)."""
        ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()}
        body = self.body(self.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext))
        return {mq["queueId"]: offset for mq, offset in body.get("offsetTable", {}).items()}

    def rollback_offset(
        self, addr: str, topic: str, group: str, timestamp: int, force: bool = True
    ) -> list[dict[str, Any]]:
        """mqadmin's resetOffsetByTimeOld on one broker, for a group with no consumer online: each queue's
        offset at ``timestamp`` (-1: the queue's end) is committed with UPDATE_CONSUMER_OFFSET (with
        ``force``, or when it is not ahead of the committed one). A queue the group never consumed counts its
        oldest offset as consumed. One RollbackStats row (as JSON names it) per queue."""
        table = self.consume_stats(addr, group).get("offsetTable", {})
        queues = [(mq, row["brokerOffset"], row["consumerOffset"]) for mq, row in table.items() if mq["topic"] == topic]
        if not queues:
            stats = self.topic_stats(addr, topic)
            queues = [(mq, row["maxOffset"], row["minOffset"]) for mq, row in stats.items()]
        out = []
        for mq, broker_offset, consumer_offset in sorted(queues, key=lambda q: q[0]["queueId"]):
            qid = mq["queueId"]
            if timestamp == -1:
                target = self.queue_offsets(addr, topic, qid)[1]
            else:
                target = self.search_offset(addr, topic, qid, timestamp)
            rollback = consumer_offset
            if force or target <= consumer_offset:
                header = UpdateConsumerOffsetRequestHeader(group, topic, qid, target).encode()
                self.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)
                rollback = target
            out.append(
                {
                    "brokerName": mq["brokerName"],
                    "queueId": qid,
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "timestampOffset": target,
                    "rollbackOffset": rollback,
                }
            )
        return out


def _masters(broker_datas: Iterable[dict[str, Any]]) -> dict[str, str]:
    """brokerName → master address (broker id 0) of BrokerData objects as JSON gives them."""
    out = {}
    for bd in broker_datas:
        addrs = {int(k): v for k, v in bd.get("brokerAddrs", {}).items()}
        if MASTER_ID in addrs:
            out[bd["brokerName"]] = addrs[MASTER_ID]
    return out
