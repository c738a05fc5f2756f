"""``python -m gateway.admin`` / ``rocketmq-gateway admin``: mqadmin's subcommands, with its names and
options, for users without Java. Tables fit the terminal; ``--json`` prints JSON instead."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from gateway.client.message_id import create_uniq_id
from gateway.remoting import fastjson
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.headers import SendMessageRequestHeader
from gateway.remoting.message import MessageConst, MessageExt, properties_to_string
from gateway.trace.view import format_trace_views, trace_views

from .ext import AdminError, AdminExt

Command = Callable[[AdminExt, argparse.Namespace], Any]
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Command]] = {}


def command(name: str, summary: str, options: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> Any:
    def register(fn: Command) -> Command:
        _COMMANDS[name] = (summary, options, fn)
        return fn

    return register


# -- output


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns; the widest ones are cut (with ``…``) so a line fits the terminal."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
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
    return int(datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").timestamp() * 1000)


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
    p.add_argument("-b", "--brokerAddr", help="one broker (host:port)")
    p.add_argument("-c", "--clusterName", help="every master of a cluster")


def _targets(admin: AdminExt, args: argparse.Namespace) -> dict[str, str]:
    if args.brokerAddr:
        return {args.brokerAddr: args.brokerAddr}
    if args.clusterName:
        masters = admin.master_addrs(args.clusterName)
        if not masters:
            raise SystemExit(f"cluster {args.clusterName} has no master broker")
        return masters
    raise SystemExit("name a broker (-b) or a cluster (-c)")


# -- name server and routes


@command("clusterList", "brokers of each cluster", lambda p: p.add_argument("-c", "--clusterName"))
def cluster_list(admin: AdminExt, args: argparse.Namespace) -> Any:
    info = admin.cluster_info()
    brokers = info.get("brokerAddrTable", {})
    rows = []
    for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
        if args.clusterName and cluster != args.clusterName:
            continue
        for name in sorted(names):
            for bid, addr in sorted(brokers.get(name, {}).get("brokerAddrs", {}).items(), key=lambda kv: int(kv[0])):
                try:
                    rt = admin.runtime_info(addr)
                except (AdminError, OSError):
                    rt = {}
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "bid": int(bid),
                        "addr": addr,
                        "version": rt.get("brokerVersionDesc", "-"),
                        "inTPS": rt.get("putTps", "0").split(" ")[0],
                        "outTPS": rt.get("getTransferedTps", "0").split(" ")[0],
                        "activated": rt.get("brokerActive", "-"),
                    }
                )
    return rows, ["cluster", "brokerName", "bid", "addr", "version", "inTPS", "outTPS", "activated"]


@command("topicList", "every topic the name servers know", lambda p: p.add_argument("-c", "--clusterName"))
def topic_list(admin: AdminExt, args: argparse.Namespace) -> Any:
    if args.clusterName:
        body = admin.body(admin.call_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": args.clusterName}))
        return sorted(body["topicList"])
    return admin.topic_list()


@command("topicRoute", "a topic's route", lambda p: p.add_argument("-t", "--topic", required=True))
def topic_route(admin: AdminExt, args: argparse.Namespace) -> Any:
    return admin.topic_route(args.topic)


@command("topicStatus", "min/max offset of each queue", lambda p: p.add_argument("-t", "--topic", required=True))
def topic_status(admin: AdminExt, args: argparse.Namespace) -> Any:
    rows = []
    for addr in admin.route_masters(args.topic).values():
        for mq, row in admin.topic_stats(addr, args.topic).items():
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
    return rows, ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdated"]


def _update_topic_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=PermName.PERM_READ | PermName.PERM_WRITE)
    p.add_argument("-o", "--order", choices=("true", "false"), default="false")


@command("updateTopic", "create or change a topic", _update_topic_args)
def update_topic(admin: AdminExt, args: argparse.Namespace) -> Any:
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
        admin.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
        done.append(f"create topic to {addr} success.")
    return done


def _delete_topic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", required=True)


@command("deleteTopic", "delete a topic from a cluster's masters and the name servers", _delete_topic_args)
def delete_topic(admin: AdminExt, args: argparse.Namespace) -> Any:
    for addr in admin.master_addrs(args.clusterName).values():
        admin.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": args.topic})
    for addr in admin.namesrv:
        admin.call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": args.topic})
    return [f"delete topic [{args.topic}] from cluster [{args.clusterName}] success."]


# -- subscription groups and consumers


def _update_group_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-s", "--consumeEnable", choices=("true", "false"), default="true")
    p.add_argument("-m", "--consumeFromMinEnable", choices=("true", "false"), default="false")
    p.add_argument("-d", "--consumeBroadcastEnable", choices=("true", "false"), default="false")
    p.add_argument("-q", "--retryQueueNums", type=int, default=1)
    p.add_argument("-r", "--retryMaxTimes", type=int, default=16)
    p.add_argument("-i", "--brokerId", type=int, default=0)
    p.add_argument("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1)


@command("updateSubGroup", "create or change a subscription group", _update_group_args)
def update_sub_group(admin: AdminExt, args: argparse.Namespace) -> Any:
    body = fastjson.dumps(
        {
            "brokerId": args.brokerId,
            "consumeBroadcastEnable": args.consumeBroadcastEnable == "true",
            "consumeEnable": args.consumeEnable == "true",
            "consumeFromMinEnable": args.consumeFromMinEnable == "true",
            "groupName": args.groupName,
            "notifyConsumerIdsChangedEnable": True,
            "retryMaxTimes": args.retryMaxTimes,
            "retryQueueNums": args.retryQueueNums,
            "whichBrokerWhenConsumeSlowly": args.whichBrokerWhenConsumeSlowly,
        }
    )
    done = []
    for addr in _targets(admin, args).values():
        admin.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        done.append(f"create subscription group to {addr} success.")
    return done


def _delete_group_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-r", "--removeOffset", choices=("true", "false"), default="false")


@command("deleteSubGroup", "delete a subscription group", _delete_group_args)
def delete_sub_group(admin: AdminExt, args: argparse.Namespace) -> Any:
    done = []
    for addr in _targets(admin, args).values():
        ext = {"groupName": args.groupName, "removeOffset": args.removeOffset}
        admin.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)
        done.append(f"delete subscription group [{args.groupName}] from broker [{addr}] success.")
    return done


def _group_topic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-t", "--topicName")


@command("consumerProgress", "a group's offsets and lag per queue", _group_topic_args)
def consumer_progress(admin: AdminExt, args: argparse.Namespace) -> Any:
    rows = []
    total_diff = 0
    retry = f"%RETRY%{args.groupName}"
    topics = {args.topicName} if args.topicName else set()
    masters = admin.route_masters(args.topicName or retry)
    for addr in masters.values():
        try:
            stats = admin.consume_stats(addr, args.groupName, args.topicName)
        except AdminError:
            continue
        for mq, row in stats.get("offsetTable", {}).items():
            if topics and mq["topic"] not in topics:
                continue
            diff = row["brokerOffset"] - row["consumerOffset"]
            total_diff += diff
            rows.append(
                {
                    "topic": mq["topic"],
                    "brokerName": mq["brokerName"],
                    "queueId": mq["queueId"],
                    "brokerOffset": row["brokerOffset"],
                    "consumerOffset": row["consumerOffset"],
                    "diff": diff,
                    "lastTime": _ms(row.get("lastTimestamp", 0)),
                }
            )
    rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    return (
        rows,
        ["topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff", "lastTime"],
        (f"Diff Total: {total_diff}"),
    )


@command("consumerConnection", "a group's clients", lambda p: p.add_argument("-g", "--consumerGroup", required=True))
def consumer_connection(admin: AdminExt, args: argparse.Namespace) -> Any:
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
        tail = f"ConsumeType: {body.get('consumeType')}\nMessageModel: {body.get('messageModel')}\n" + (
            f"ConsumeFromWhere: {body.get('consumeFromWhere')}"
        )
        return rows, ["clientId", "clientAddr", "language", "version"], tail
    raise SystemExit(f"consumer group {args.consumerGroup} not found (no %RETRY% route)")


def _producer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--producerGroup", required=True)
    p.add_argument("-t", "--topic", required=True)


@command("producerConnection", "a producer group's clients", _producer_args)
def producer_connection(admin: AdminExt, args: argparse.Namespace) -> Any:
    rows = []
    for addr in admin.route_masters(args.topic).values():
        try:
            body = admin.body(
                admin.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": args.producerGroup})
            )
        except AdminError:
            continue
        rows.extend(
            {k: c[k] for k in ("clientId", "clientAddr", "language", "version")} for c in body.get("connectionSet", [])
        )
    return rows, ["clientId", "clientAddr", "language", "version"]


# -- brokers


@command("brokerStatus", "a broker's runtime figures", _target_args)
def broker_status(admin: AdminExt, args: argparse.Namespace) -> Any:
    return {addr: dict(sorted(admin.runtime_info(addr).items())) for addr in _targets(admin, args).values()}


@command("getBrokerConfig", "a broker's settings", _target_args)
def get_broker_config(admin: AdminExt, args: argparse.Namespace) -> Any:
    return {addr: admin.broker_config(addr) for addr in _targets(admin, args).values()}


def _update_config_args(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)


@command("updateBrokerConfig", "change one setting at run time", _update_config_args)
def update_broker_config(admin: AdminExt, args: argparse.Namespace) -> Any:
    done = []
    for addr in _targets(admin, args).values():
        admin.update_broker_config(addr, args.key, args.value)
        done.append(f"update broker config success, {addr}")
    return done


# -- messages


@command("queryMsgById", "a message by its offsetMsgId", lambda p: p.add_argument("-i", "--msgId", required=True))
def query_msg_by_id(admin: AdminExt, args: argparse.Namespace) -> Any:
    return [admin.view_message(i.strip()) for i in args.msgId.split(",")]


def _key_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", required=True)


@command("queryMsgByKey", "messages by KEYS", _key_args)
def query_msg_by_key(admin: AdminExt, args: argparse.Namespace) -> Any:
    msgs = admin.query_message(args.topic, args.msgKey)
    rows = [{"msgId": m.client_msg_id, "queueId": m.queue_id, "queueOffset": m.queue_offset} for m in msgs]
    return rows, ["msgId", "queueId", "queueOffset"]


def _unique_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-i", "--msgId", required=True)


@command("queryMsgByUniqueKey", "a message by its msgId (UNIQ_KEY)", _unique_args)
def query_msg_by_unique_key(admin: AdminExt, args: argparse.Namespace) -> Any:
    return admin.query_message(args.topic, args.msgId, unique=True)[:1]


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--msgId", required=True)
    p.add_argument("-t", "--traceTopic", default="RMQ_SYS_TRACE_TOPIC")


@command("queryMsgTraceById", "a message's trace", _trace_args)
def query_msg_trace_by_id(admin: AdminExt, args: argparse.Namespace) -> Any:
    found = admin.query_message(args.traceTopic, args.msgId)
    views = trace_views(found, args.msgId)
    return _Text(format_trace_views(views), [asdict(v) for v in views])


def _reset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, help="ms, now, or yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("-f", "--force", choices=("true", "false"), default="true")


@command("resetOffsetByTime", "move a group's offsets on a topic to a time", _reset_args)
def reset_offset_by_time(admin: AdminExt, args: argparse.Namespace) -> Any:
    ts = parse_time(args.timestamp)
    result = admin.reset_offset_by_time(args.topic, args.group, ts, args.force == "true")
    rows = []
    for name, table in result.items():
        if "error" in table:
            rows.append({"brokerName": name, "queue": "-", "offset": table["error"]})
            progress(f"{name}: {table['error']}")
            continue
        for queue, offset in sorted(table.items()):
            rows.append({"brokerName": name, "queue": queue, "offset": offset})
        progress(f"{name}: {len(table)} queue(s) reset")
    return rows, ["brokerName", "queue", "offset"]


def _send_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--body", required=True)
    p.add_argument("-k", "--key")
    p.add_argument("-c", "--tags")
    p.add_argument("-i", "--qid", type=int, default=0)


@command("sendMessage", "send one message", _send_args)
def send_message(admin: AdminExt, args: argparse.Namespace) -> Any:
    masters = admin.route_masters(args.topic)
    if not masters:
        raise SystemExit(f"no route for topic {args.topic}")
    name, addr = next(iter(masters.items()))
    props = {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: create_uniq_id(), MessageConst.WAIT_STORE_MSG_OK: "true"}
    if args.key:
        props[MessageConst.KEYS] = args.key
    if args.tags:
        props[MessageConst.TAGS] = args.tags
    header = SendMessageRequestHeader(
        producer_group="TOOLS_PRODUCER",
        topic=args.topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=args.qid,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties_to_string(props),
        reconsume_times=0,
    ).encode_v2()
    response = admin.call(addr, RequestCode.SEND_MESSAGE_V2, header, args.body.encode())
    ext = response.ext_fields or {}
    row = {"brokerName": name, "queueId": ext.get("queueId"), "sendStatus": "SEND_OK",
           "msgId": props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX], "offsetMsgId": ext.get("msgId")}  # fmt: skip
    return [row], list(row)


def _consume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--msgCount", type=int, default=128)
    p.add_argument("-s", "--beginTimestamp", default="0")
    p.add_argument("-e", "--endTimestamp")


@command("consumeMessage", "read messages of a topic (no offsets committed)", _consume_args)
def consume_message(admin: AdminExt, args: argparse.Namespace) -> Any:
    end = parse_time(args.endTimestamp) if args.endTimestamp else None
    out = []
    for m in admin.messages_in_range(args.topic, parse_time(args.beginTimestamp), end):
        out.append(m)
        if len(out) >= args.msgCount:
            break
    return out


def _print_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--beginTimestamp", default="0")
    p.add_argument("-e", "--endTimestamp")
    p.add_argument("-d", "--printBody", choices=("true", "false"), default="true")


@command("printMsg", "every message of a topic in a time range, queue by queue", _print_args)
def print_msg(admin: AdminExt, args: argparse.Namespace) -> Any:
    end = parse_time(args.endTimestamp) if args.endTimestamp else None
    msgs = admin.messages_in_range(
        args.topic, parse_time(args.beginTimestamp), end, progress=lambda d, n: progress(f"queue {d}/{n} read")
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


def progress(line: str) -> None:
    """Progress of long work, on standard error (standard output stays parseable)."""
    print(line, file=sys.stderr, flush=True)


def _emit(result: Any, as_json: bool) -> None:
    if isinstance(result, _Text):
        print(json.dumps(result.data, indent=2, default=str) if as_json else result.text)
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
    if isinstance(result, tuple):
        rows, headers, *tail = result
        if as_json:
            print(json.dumps(rows, indent=2, default=str))
            return
        print(table(headers, [[r[h] for h in headers] for r in rows]))
        for line in tail:
            print(line)
        return
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    elif isinstance(result, dict) and all(isinstance(v, dict) for v in result.values()):
        for name, values in result.items():
            print(f"============{name}============")
            for k, v in values.items():
                print(f"{k:<40}: {v}")
    elif isinstance(result, list):
        for line in result:
            print(line)
    else:
        print(json.dumps(result, indent=2, default=str))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocketmq-gateway admin", description="mqadmin's subcommands, with its names and options"
    )
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (summary, options, _) in _COMMANDS.items():
        p = sub.add_parser(name, help=summary, description=summary)
        p.add_argument("-n", "--namesrvAddr", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("--accessKey", default=os.environ.get("ROCKETMQ_ACCESS_KEY"), help="ACL access key")
        p.add_argument("--secretKey", default=os.environ.get("ROCKETMQ_SECRET_KEY"), help="ACL secret key")
        p.add_argument("--tls", action="store_true", help="connect with TLS")
        p.add_argument("--tlsTrustCertPath", help="verify the servers against this CA file")
        p.add_argument("--tlsCertPath", help="client certificate, for servers that require one (mutual TLS)")
        p.add_argument("--tlsKeyPath", help="the client certificate's private key")
        p.add_argument("--timeoutMillis", type=int, default=10000)
        options(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    tls = None
    if args.tls:
        import ssl

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls.check_hostname = False
        if args.tlsTrustCertPath:
            tls.load_verify_locations(args.tlsTrustCertPath)
        else:
            tls.verify_mode = ssl.CERT_NONE
        if args.tlsCertPath:
            tls.load_cert_chain(args.tlsCertPath, args.tlsKeyPath)
    _, _, run = _COMMANDS[args.command]
    try:
        with AdminExt(
            args.namesrvAddr,
            access_key=args.accessKey,
            secret_key=args.secretKey,
            tls=tls,
            timeout=args.timeoutMillis / 1000,
        ) as admin:
            _emit(run(admin, args), args.json)
    except AdminError as e:
        print(f"{args.command} command failed: {e}", file=sys.stderr)
        return 1 if e.code != ResponseCode.SUCCESS else 0
    except (OSError, ValueError) as e:
        print(f"{args.command} command failed: {e}", file=sys.stderr)
        return 1
    return 0
