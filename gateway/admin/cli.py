"""``python -m gateway.admin`` / ``rocketmq-gateway admin``: mqadmin's subcommands, with its names and
options, for users without Java. Tables fit the terminal; ``--json`` prints JSON instead."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from gateway.remoting import fastjson
from gateway.remoting.bodies import GroupRetryPolicy, SubscriptionGroupConfig
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.message import MessageConst, MessageExt
from gateway.trace.view import format_trace_views, trace_views

from .ext import AdminError, AdminExt, check_addr, namesrv_addrs

DEFAULT_NAMESRV_ADDR = "127.0.0.1:9876"
TIME_FORMAT = "ms since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS (local time)"


class CommandFailed(Exception):
    """The command cannot do what was asked (the message says why)."""


class Session(AdminExt):
    """The AdminExt of one subcommand, keeping the errors of the parts that failed while the command went on
    with the others: the run then exits 1."""

    def __init__(self, namesrv: str, **kwargs: Any) -> None:
        super().__init__(namesrv, **kwargs)
        self.errors: list[Exception] = []

    @contextlib.contextmanager
    def part(self) -> Iterator[None]:
        """One part of the command (one broker, one queue): its error is kept, and the command goes on."""
        try:
            yield
        except (AdminError, OSError) as e:
            self.errors.append(e)


Command = Callable[[Session, argparse.Namespace], Any]
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Command]] = {}


def command(name: str, summary: str, options: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> Any:
    def register(fn: Command) -> Command:
        _COMMANDS[name] = (summary, options, fn)
        return fn

    return register


# -- output


@dataclass
class Table:
    """Rows for a table, and the lines printed under it (label → value); ``--json`` prints the rows, or an
    object of them (under ``name``) and the lines' values when there are lines."""

    rows: list[dict[str, Any]]
    headers: list[str]
    tail: dict[str, Any] = field(default_factory=dict)
    name: str = "rows"

    def json(self) -> Any:
        if not self.tail:
            return self.rows
        # "Diff Total" → "diffTotal", "ConsumeType" → "consumeType"
        keys = {label: label.replace(" ", "") for label in self.tail}
        return {self.name: self.rows, **{k[0].lower() + k[1:]: self.tail[label] for label, k in keys.items()}}


def _cell(value: Any) -> str:
    """A value as mqadmin prints it: true/false, 2 decimals, ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns; the widest ones are cut (with ``…``) so a line fits the terminal."""
    cells = [[str(c) for c in headers]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    room = shutil.get_terminal_size((160, 24)).columns - 2 * (len(headers) - 1)
    while sum(widths) > room and max(widths) > 8:
        widths[widths.index(max(widths))] -= 1
    lines = []
    for row in cells:
        parts = [c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(row, widths, strict=True)]
        lines.append("  ".join(p.ljust(w) for p, w in zip(parts, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _ms(ts: int) -> str:
    return datetime.fromtimestamp(ts / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3] if ts > 0 else "-"


def parse_time(text: str) -> int:
    """A time as mqadmin takes it: ms since the epoch, ``now``, or ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    if text == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad time {text!r}: want {TIME_FORMAT}") from None


def _addr(text: str) -> str:
    try:
        return check_addr(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def message_json(m: MessageExt, body: bool = True) -> dict[str, Any]:
    out = {
        "topic": m.topic,
        "msgId": m.client_msg_id,
        "offsetMsgId": m.msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commitlog_offset,
        "reconsumeTimes": m.reconsume_times,
        "bornTimestamp": m.born_timestamp,
        "bornHost": m.born_host,
        "storeTimestamp": m.store_timestamp,
        "storeHost": m.store_host,
        "sysFlag": m.sys_flag,
        "properties": m.properties,
    }
    if body:
        out["body"] = m.body.decode("utf-8", "replace")
    return out


def print_message(m: MessageExt, body: bool = True) -> None:
    for key, value in message_json(m, body).items():
        if key.endswith("Timestamp"):
            value = f"{_ms(value)} ({value})"
        print(f"{key[0].upper() + key[1:]:<20}: {value}")
    print()


# -- targets


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--brokerAddr", type=_addr, help="one broker (host:port)")
    p.add_argument("-c", "--clusterName", help="every master of a cluster")


def _targets(admin: Session, args: argparse.Namespace) -> dict[str, str]:
    if args.brokerAddr:
        return {args.brokerAddr: args.brokerAddr}
    if args.clusterName:
        masters = admin.master_addrs(args.clusterName)
        if not masters:
            raise CommandFailed(f"cluster {args.clusterName} has no master broker")
        return masters
    raise CommandFailed("name a broker (-b) or a cluster (-c)")


# -- name server and routes


@command("clusterList", "brokers of each cluster", lambda p: p.add_argument("-c", "--clusterName"))
def cluster_list(admin: Session, args: argparse.Namespace) -> Any:
    info = admin.cluster_info()
    brokers = info.get("brokerAddrTable", {})
    rows = []
    for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
        if args.clusterName and cluster != args.clusterName:
            continue
        for name in sorted(names):
            for bid, addr in sorted(brokers.get(name, {}).get("brokerAddrs", {}).items(), key=lambda kv: int(kv[0])):
                rt: dict[str, str] = {}
                with admin.part():
                    rt = admin.runtime_info(addr)
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "bid": int(bid),
                        "addr": addr,
                        "version": rt.get("brokerVersionDesc"),
                        "inTPS": _tps(rt.get("putTps")),
                        "outTPS": _tps(rt.get("getTransferedTps")),
                        "activated": rt["brokerActive"] == "true" if "brokerActive" in rt else None,
                    }
                )
    return Table(rows, ["cluster", "brokerName", "bid", "addr", "version", "inTPS", "outTPS", "activated"])


def _tps(figures: str | None) -> float | None:
    """The first of a runtime-info TPS figure's ``"10s 1min 10min"`` rates."""
    return float(figures.split(" ")[0]) if figures else None


@command("topicList", "every topic the name servers know", lambda p: p.add_argument("-c", "--clusterName"))
def topic_list(admin: Session, args: argparse.Namespace) -> Any:
    if args.clusterName:
        body = admin.body(admin.call_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": args.clusterName}))
        return sorted(body["topicList"])
    return admin.topic_list()


@command("topicRoute", "a topic's route", lambda p: p.add_argument("-t", "--topic", required=True))
def topic_route(admin: Session, args: argparse.Namespace) -> Any:
    return admin.topic_route(args.topic)


@command("topicStatus", "min/max offset of each queue", lambda p: p.add_argument("-t", "--topic", required=True))
def topic_status(admin: Session, args: argparse.Namespace) -> Any:
    rows = []
    for addr in admin.route_masters(args.topic).values():
        stats: dict[str, Any] = {}
        with admin.part():
            stats = admin.topic_stats(addr, args.topic)
        for mq, row in stats.items():
            rows.append(
                {
                    "brokerName": mq["brokerName"],
                    "queueId": mq["queueId"],
                    "minOffset": row["minOffset"],
                    "maxOffset": row["maxOffset"],
                    "lastUpdated": _ms(row.get("lastUpdateTimestamp", 0)),
                }
            )
    rows.sort(key=lambda r: (r["brokerName"], r["queueId"]))
    return Table(rows, ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdated"])


def _update_topic_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=PermName.PERM_READ | PermName.PERM_WRITE)
    p.add_argument("-o", "--order", choices=("true", "false"), default="false")


@command("updateTopic", "create or change a topic", _update_topic_args)
def update_topic(admin: Session, args: argparse.Namespace) -> Any:
    ext = {
        "topic": args.topic,
        "defaultTopic": "TBW102",
        "readQueueNums": str(args.readQueueNums),
        "writeQueueNums": str(args.writeQueueNums),
        "perm": str(args.perm),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": args.order,
    }
    done = []
    for addr in _targets(admin, args).values():
        with admin.part():
            admin.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
            done.append(f"create topic to {addr} success.")
    return done


def _delete_topic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", required=True)


@command("deleteTopic", "delete a topic from a cluster's masters and the name servers", _delete_topic_args)
def delete_topic(admin: Session, args: argparse.Namespace) -> Any:
    for addr in admin.master_addrs(args.clusterName).values():
        with admin.part():
            admin.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": args.topic})
    for addr in admin.namesrv:
        with admin.part():
            admin.call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": args.topic})
    return [] if admin.errors else [f"delete topic [{args.topic}] from cluster [{args.clusterName}] success."]


# -- subscription groups and consumers


def _update_group_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-s", "--consumeEnable", choices=("true", "false"), default="true")
    p.add_argument("-m", "--consumeFromMinEnable", choices=("true", "false"), default="false")
    p.add_argument("-d", "--consumeBroadcastEnable", choices=("true", "false"), default="false")
    p.add_argument("-o", "--consumeMessageOrderly", choices=("true", "false"), default="false")
    p.add_argument("-q", "--retryQueueNums", type=int, default=1)
    p.add_argument("-r", "--retryMaxTimes", type=int, default=16)
    p.add_argument(
        "-p",
        "--groupRetryPolicy",
        help='the retry policy of 5.x consumers as JSON, e.g. {"type":"EXPONENTIAL","exponentialRetryPolicy":'
        '{"initial":5000,"max":7200000,"multiplier":2}} or {"type":"CUSTOMIZED","customizedRetryPolicy":'
        '{"next":[1000,5000,10000]}}',
    )
    p.add_argument("-i", "--brokerId", type=int, default=0)
    p.add_argument("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1)


@command("updateSubGroup", "create or change a subscription group", _update_group_args)
def update_sub_group(admin: Session, args: argparse.Namespace) -> Any:
    policy = GroupRetryPolicy()
    if args.groupRetryPolicy is not None:
        try:
            policy = GroupRetryPolicy.from_json(json.loads(args.groupRetryPolicy))
        except ValueError as e:  # JSONDecodeError and BodyError are ValueErrors
            raise CommandFailed(f"--groupRetryPolicy: {e}") from None
    config = SubscriptionGroupConfig(
        args.groupName,
        consume_enable=args.consumeEnable == "true",
        consume_from_min_enable=args.consumeFromMinEnable == "true",
        consume_broadcast_enable=args.consumeBroadcastEnable == "true",
        retry_queue_nums=args.retryQueueNums,
        retry_max_times=args.retryMaxTimes,
        broker_id=args.brokerId,
        which_broker_when_consume_slowly=args.whichBrokerWhenConsumeSlowly,
        consume_message_orderly=args.consumeMessageOrderly == "true",
        group_retry_policy=policy,
    )
    body = fastjson.dumps(config.to_json())
    done = []
    for addr in _targets(admin, args).values():
        with admin.part():
            admin.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            done.append(f"create subscription group to {addr} success.")
    return done


def _delete_group_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-r", "--removeOffset", choices=("true", "false"), default="false")


@command("deleteSubGroup", "delete a subscription group", _delete_group_args)
def delete_sub_group(admin: Session, args: argparse.Namespace) -> Any:
    done = []
    for addr in _targets(admin, args).values():
        ext = {"groupName": args.groupName, "removeOffset": args.removeOffset}
        with admin.part():
            admin.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)
            done.append(f"delete subscription group [{args.groupName}] from broker [{addr}] success.")
    return done


def _group_topic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-t", "--topicName")
    p.add_argument("-s", "--showClientIP", action="store_true", help="which client holds each queue")


# The clients asked which queues they hold, at most: one GET_CONSUMER_RUNNING_INFO each.
ALLOCATION_CLIENTS = 64


def queue_allocation(admin: AdminExt, group: str, masters: dict[str, str]) -> dict[tuple[str, str, int], str]:
    """(topic, brokerName, queueId) → the IP of the client holding the queue, from each online client's running
    info (mqadmin consumerProgress -s). As mqadmin, the first client that does not answer ends the asking (each
    costs the broker's timeout): the queues not found show N/A."""
    held: dict[tuple[str, str, int], str] = {}
    for addr in masters.values():
        try:
            clients = admin.consumer_connections(addr, group).get("connectionSet", [])
        except (AdminError, OSError):
            continue  # another broker lists them
        try:
            for client in clients[:ALLOCATION_CLIENTS]:
                info = admin.consumer_running_info(addr, group, client["clientId"])
                for mq in info.get("mqTable", {}):
                    held[mq["topic"], mq["brokerName"], mq["queueId"]] = client["clientId"].split("@")[0]
        except (AdminError, OSError):
            break
        if clients:  # every broker knows the same clients: one that lists them is enough
            break
    return held


@command("consumerProgress", "a group's offsets, lag and messages in flight per queue", _group_topic_args)
def consumer_progress(admin: Session, args: argparse.Namespace) -> Any:
    """mqadmin's columns; inflight is what was pulled and not committed (pullOffset - consumerOffset) plus,
    for pops, the messages popped and neither acked nor revived yet (the broker's popInflight)."""
    rows = []
    total_diff = total_inflight = 0
    retry = f"%RETRY%{args.groupName}"
    topics = {args.topicName} if args.topicName else set()
    masters = admin.route_masters(args.topicName or retry)
    held = queue_allocation(admin, args.groupName, masters) if getattr(args, "showClientIP", False) else None
    for addr in masters.values():
        stats: dict[str, Any] = {}
        with admin.part():
            stats = admin.consume_stats(addr, args.groupName, args.topicName)
        for mq, row in stats.get("offsetTable", {}).items():
            if topics and mq["topic"] not in topics:
                continue
            diff = row["brokerOffset"] - row["consumerOffset"]
            pulled = row.get("pullOffset", row["consumerOffset"]) - row["consumerOffset"]
            inflight = max(pulled, 0) + row.get("popInflight", 0)
            total_diff += diff
            total_inflight += inflight
            rows.append(
                {
                    "topic": mq["topic"],
                    "brokerName": mq["brokerName"],
                    "queueId": mq["queueId"],
                    "brokerOffset": row["brokerOffset"],
                    "consumerOffset": row["consumerOffset"],
                    "diff": diff,
                    "inflight": inflight,
                    "lastTime": _ms(row.get("lastTimestamp", 0)),
                }
            )
            if held is not None:
                rows[-1]["clientIP"] = held.get((mq["topic"], mq["brokerName"], mq["queueId"]), "N/A")
    rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    headers = ["topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff", "inflight", "lastTime"]
    if held is not None:  # where mqadmin puts it
        headers.insert(5, "clientIP")
    tail = {"Diff Total": total_diff, "Inflight Total": total_inflight}
    return Table(rows, headers, tail, "offsetTable")


@command("consumerConnection", "a group's clients", lambda p: p.add_argument("-g", "--consumerGroup", required=True))
def consumer_connection(admin: Session, args: argparse.Namespace) -> Any:
    for addr in admin.route_masters(f"%RETRY%{args.consumerGroup}").values():
        body = admin.body(
            admin.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": args.consumerGroup})
        )
        rows = [
            {
                "clientId": c["clientId"],
                "clientAddr": c["clientAddr"],
                "language": c["language"],
                "version": c["version"],
            }
            for c in body.get("connectionSet", [])
        ]
        tail = {k[0].upper() + k[1:]: body.get(k) for k in ("consumeType", "messageModel", "consumeFromWhere")}
        return Table(rows, ["clientId", "clientAddr", "language", "version"], tail, "connectionSet")
    raise CommandFailed(f"consumer group {args.consumerGroup} not found (no %RETRY% route)")


def _producer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--producerGroup", required=True)
    p.add_argument("-t", "--topic", required=True)


@command("producerConnection", "a producer group's clients", _producer_args)
def producer_connection(admin: Session, args: argparse.Namespace) -> Any:
    rows = []
    ext = {"producerGroup": args.producerGroup}
    for addr in admin.route_masters(args.topic).values():
        body: dict[str, Any] = {}
        with admin.part():
            # A broker no producer of the group is connected to answers SYSTEM_ERROR: not a failure.
            ok = (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)
            response = admin.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, ext, ok=ok)
            body = admin.body(response) if response.code == ResponseCode.SUCCESS else {}
        rows.extend(
            {k: c[k] for k in ("clientId", "clientAddr", "language", "version")} for c in body.get("connectionSet", [])
        )
    if not rows and not admin.errors:
        raise CommandFailed(f"Not found the producer group connection: {args.producerGroup}")
    return Table(rows, ["clientId", "clientAddr", "language", "version"])


# -- brokers


@command("brokerStatus", "a broker's runtime figures", _target_args)
def broker_status(admin: Session, args: argparse.Namespace) -> Any:
    out = {}
    for addr in _targets(admin, args).values():
        with admin.part():
            out[addr] = dict(sorted(admin.runtime_info(addr).items()))
    return _Text(_sections(out), {addr: {k: _figure(v) for k, v in kv.items()} for addr, kv in out.items()})


def _figure(text: str) -> Any:
    """A runtime-info value (a string on the wire) as the number or boolean it shows, for JSON."""
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    return text


@command("getBrokerConfig", "a broker's settings", _target_args)
def get_broker_config(admin: Session, args: argparse.Namespace) -> Any:
    out = {}
    for addr in _targets(admin, args).values():
        with admin.part():
            out[addr] = admin.broker_config(addr)
    return out


def _update_config_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)


@command("updateBrokerConfig", "change one setting at run time", _update_config_args)
def update_broker_config(admin: Session, args: argparse.Namespace) -> Any:
    done = []
    for addr in _targets(admin, args).values():
        with admin.part():
            admin.update_broker_config(addr, args.key, args.value)
            done.append(f"update broker config success, {addr}")
    return done


# -- messages


@command("queryMsgById", "a message by its offsetMsgId", lambda p: p.add_argument("-i", "--msgId", required=True))
def query_msg_by_id(admin: Session, args: argparse.Namespace) -> Any:
    return [admin.view_message(i.strip()) for i in args.msgId.split(",")]


def _key_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", required=True)


@command("queryMsgByKey", "messages by KEYS", _key_args)
def query_msg_by_key(admin: Session, args: argparse.Namespace) -> Any:
    msgs = admin.query_message(args.topic, args.msgKey)
    rows = [{"msgId": m.client_msg_id, "queueId": m.queue_id, "queueOffset": m.queue_offset} for m in msgs]
    return Table(rows, ["msgId", "queueId", "queueOffset"])


def _unique_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-i", "--msgId", required=True)


@command("queryMsgByUniqueKey", "a message by its msgId (UNIQ_KEY)", _unique_args)
def query_msg_by_unique_key(admin: Session, args: argparse.Namespace) -> Any:
    return admin.query_message(args.topic, args.msgId, unique=True)[:1]


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--msgId", required=True)
    p.add_argument("-t", "--traceTopic", default="RMQ_SYS_TRACE_TOPIC")


@command("queryMsgTraceById", "a message's trace", _trace_args)
def query_msg_trace_by_id(admin: Session, args: argparse.Namespace) -> Any:
    found = admin.query_message(args.traceTopic, args.msgId)
    views = trace_views(found, args.msgId)
    return _Text(format_trace_views(views), [asdict(v) for v in views])


def _reset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", metavar="TIME", required=True, type=parse_time, help=TIME_FORMAT)
    p.add_argument("-f", "--force", choices=("true", "false"), default="true")


@command("resetOffsetByTime", "move a group's offsets on a topic to a time", _reset_args)
def reset_offset_by_time(admin: Session, args: argparse.Namespace) -> Any:
    force = args.force == "true"
    masters = admin.route_masters(args.topic)
    rows = []
    errors: list[Exception] = []
    for name, addr in masters.items():
        try:
            table = admin.reset_offset(addr, args.topic, args.group, args.timestamp, force)
        except (AdminError, OSError) as e:
            errors.append(e)
            continue
        rows.extend({"brokerName": name, "queueId": q, "offset": offset} for q, offset in sorted(table.items()))
        progress(f"{name}: {len(table)} queue(s) reset")
    if not any(isinstance(e, AdminError) and e.code == ResponseCode.CONSUMER_NOT_ONLINE for e in errors):
        admin.errors.extend(errors)
        return Table(rows, ["brokerName", "queueId", "offset"])
    # As mqadmin: with no consumer online the offsets are committed on every broker instead
    # (resetOffsetByTimeOld), where the group's consumers read them when they start.
    progress(f"no consumer of {args.group} online: committing the offsets on the brokers")
    rows = []
    for name, addr in masters.items():
        with admin.part():
            rollback = admin.rollback_offset(addr, args.topic, args.group, args.timestamp, force)
            rows.extend(rollback)
            progress(f"{name}: {len(rollback)} queue(s) reset")
    headers = ["brokerName", "queueId", "brokerOffset", "consumerOffset", "timestampOffset", "rollbackOffset"]
    return Table(rows, headers)


def _send_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--body", required=True)
    p.add_argument("-k", "--key")
    p.add_argument("-c", "--tags")
    p.add_argument("-i", "--qid", type=int, default=0)


@command("sendMessage", "send one message", _send_args)
def send_message(admin: Session, args: argparse.Namespace) -> Any:
    props = {MessageConst.KEYS: args.key, MessageConst.TAGS: args.tags}
    sent = admin.send_message(args.topic, args.body.encode(), {k: v for k, v in props.items() if v}, args.qid)
    return Table([sent], list(sent))


def _range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--beginTimestamp", metavar="TIME", type=parse_time, default=0, help=f"from: {TIME_FORMAT}")
    p.add_argument("-e", "--endTimestamp", metavar="TIME", type=parse_time, help=f"to: {TIME_FORMAT} (default now)")


def _consume_args(p: argparse.ArgumentParser) -> None:
    _range_args(p)
    p.add_argument("-c", "--msgCount", type=int, default=128)


@command("consumeMessage", "read messages of a topic (no offsets committed)", _consume_args)
def consume_message(admin: Session, args: argparse.Namespace) -> Any:
    out = []
    for m in admin.messages_in_range(args.topic, args.beginTimestamp, args.endTimestamp):
        out.append(m)
        if len(out) >= args.msgCount:
            break
    return out


def _print_args(p: argparse.ArgumentParser) -> None:
    _range_args(p)
    p.add_argument("-d", "--printBody", choices=("true", "false"), default="true")


@command("printMsg", "every message of a topic in a time range, queue by queue", _print_args)
def print_msg(admin: Session, args: argparse.Namespace) -> Any:
    msgs = admin.messages_in_range(
        args.topic, args.beginTimestamp, args.endTimestamp, progress=lambda d, n: progress(f"queue {d}/{n} read")
    )
    return _Messages(msgs, args.printBody == "true")


# -- running


class _Text:
    """Text for people, with its JSON form."""

    def __init__(self, text: str, data: Any) -> None:
        self.text, self.data = text, data


class _Messages:
    """Messages printed as they are read, so a long range never sits in memory."""

    def __init__(self, msgs: Iterable[MessageExt], body: bool) -> None:
        self.msgs, self.body = msgs, body


def _sections(result: dict[str, dict[str, Any]]) -> str:
    """``key: value`` lines under a ``====name====`` line each, as mqadmin prints a broker's figures."""
    lines = []
    for name, values in result.items():
        lines.append(f"============{name}============")
        lines.extend(f"{k:<40}: {v}" for k, v in values.items())
    return "\n".join(lines)


def progress(line: str) -> None:
    """Progress of long work, on standard error (standard output stays parseable)."""
    print(line, file=sys.stderr, flush=True)


def _emit(result: Any, as_json: bool) -> None:
    if isinstance(result, _Text):
        text = json.dumps(result.data, indent=2, default=str) if as_json else result.text
        if text:
            print(text)
        return
    if isinstance(result, _Messages) or (isinstance(result, list) and result and isinstance(result[0], MessageExt)):
        msgs, body = (result.msgs, result.body) if isinstance(result, _Messages) else (result, True)
        count = 0
        if as_json:
            print("[")
        for m in msgs:
            if as_json:
                print(("," if count else "") + json.dumps(message_json(m, body), indent=2))
            else:
                print_message(m, body)
            count += 1
        print("]" if as_json else f"{count} message(s)")
        return
    if isinstance(result, Table):
        if as_json:
            print(json.dumps(result.json(), indent=2, default=str))
            return
        print(table(result.headers, [[r[h] for h in result.headers] for r in result.rows]))
        for label, value in result.tail.items():
            print(f"{label}: {value}")
        return
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    elif isinstance(result, dict) and all(isinstance(v, dict) for v in result.values()):
        print(_sections(result))
    elif isinstance(result, list):
        for line in result:
            print(line)
    else:
        print(json.dumps(result, indent=2, default=str))


def _report(command: str, errors: list[Exception], as_json: bool) -> None:
    """The errors of a run on standard error: a line each, or one JSON object."""
    if as_json:
        entries = [{"error": str(e), **({"code": e.code} if isinstance(e, AdminError) else {})} for e in errors]
        print(json.dumps({"command": command, "errors": entries}), file=sys.stderr)
        return
    for e in errors:
        print(f"{command} command failed: {e}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (what is wrong, and where to read more)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rocketmq-gateway admin", description="mqadmin's subcommands, with its names and options")
    env = os.environ.get("NAMESRV_ADDR")
    where = f"{env}, from NAMESRV_ADDR" if env else f"NAMESRV_ADDR from the environment, else {DEFAULT_NAMESRV_ADDR}"
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (summary, options, _) in _COMMANDS.items():
        p = sub.add_parser(name, help=summary, description=summary)
        p.add_argument("-n", "--namesrvAddr", metavar="HOST:PORT[;HOST:PORT]", help=f"name servers (default: {where})")
        p.add_argument("--json", action="store_true", help="print JSON (errors too, on standard error)")
        add_connection_arguments(p)
        p.add_argument("--timeoutMillis", type=int, default=10000)
        options(p)
    return parser


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """How a tool reaches a cluster: an ACL account and TLS (mqadmin's options; the console takes them too)."""
    p.add_argument("--accessKey", default=os.environ.get("ROCKETMQ_ACCESS_KEY"), help="ACL access key")
    p.add_argument("--secretKey", default=os.environ.get("ROCKETMQ_SECRET_KEY"), help="ACL secret key")
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument("--tlsTrustCertPath", help="verify the servers against this CA file")
    p.add_argument("--tlsCertPath", help="client certificate, for servers that require one (mutual TLS)")
    p.add_argument("--tlsKeyPath", help="the client certificate's private key")


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context of ``--tls`` and its files (None without ``--tls``); CommandFailed naming a file that
    cannot be used."""
    if not args.tls:
        return None
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls.check_hostname = False
    if args.tlsTrustCertPath:
        try:
            tls.load_verify_locations(args.tlsTrustCertPath)
        except OSError as e:  # ssl's errors do not name the file
            raise CommandFailed(f"--tlsTrustCertPath {args.tlsTrustCertPath}: {e}") from e
    else:
        tls.verify_mode = ssl.CERT_NONE
    if args.tlsCertPath:
        try:
            tls.load_cert_chain(args.tlsCertPath, args.tlsKeyPath)
        except OSError as e:
            key = f" --tlsKeyPath {args.tlsKeyPath}" if args.tlsKeyPath else ""
            raise CommandFailed(f"--tlsCertPath {args.tlsCertPath}{key}: {e}") from e
    return tls


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand: 0 when every part of it worked, 1 when any failed (errors on standard error), 2 for a
    usage error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    namesrv = args.namesrvAddr or os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV_ADDR
    try:
        namesrv_addrs(namesrv)
    except ValueError as e:
        parser.error(f"{'-n' if args.namesrvAddr else 'NAMESRV_ADDR'}: {e}")
    _, _, run = _COMMANDS[args.command]
    admin: Session | None = None
    try:
        tls = tls_context(args)
        with Session(
            namesrv, access_key=args.accessKey, secret_key=args.secretKey, tls=tls, timeout=args.timeoutMillis / 1000
        ) as admin:
            _emit(run(admin, args), args.json)
            sys.stdout.flush()  # a reader gone shows here, not at exit
        errors = admin.errors
    except BrokenPipeError:
        # Python's SIGPIPE recipe: the reader left (``| head``); stop quietly, with the status of a tool that
        # SIGPIPE ended.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except (AdminError, CommandFailed, OSError, ValueError) as e:
        errors = [*(admin.errors if admin else []), e]
    if errors:
        _report(args.command, errors, args.json)
        return 1
    return 0
