"""The console's actions: mqadmin's commands (topics, groups, offsets, messages, a broker's write permission)
run with the account acting, each changing the cluster as mqadmin would."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.admin.cli import (
    delete_sub_group,
    delete_topic,
    reset_offset_by_time,
    update_sub_group,
    update_topic,
)
from gateway.remoting.codes import PermName
from gateway.remoting.message import MessageConst
from gateway.remoting.names import DLQ_GROUP_TOPIC_PREFIX

from .message_pages import MESSAGES_A_PAGE
from .routes import BadRequest, Done, View, action

_PERMS = {"RW": PermName.PERM_READ | PermName.PERM_WRITE, "R": PermName.PERM_READ, "W": PermName.PERM_WRITE}
_MAX_QUEUES = 1024
# What the brokers wrote on a dead letter on its way (retries, its original ids): not resent with it.
_BOOKKEEPING = frozenset(
    {
        MessageConst.RETRY_TOPIC,
        MessageConst.REAL_TOPIC,
        MessageConst.REAL_QUEUE_ID,
        MessageConst.ORIGIN_MESSAGE_ID,
        MessageConst.RECONSUME_TIME,
        MessageConst.MAX_RECONSUME_TIMES,
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        MessageConst.MIN_OFFSET,
        MessageConst.MAX_OFFSET,
        MessageConst.WAIT_STORE_MSG_OK,
        MessageConst.DELAY_TIME_LEVEL,
        MessageConst.CONSUME_START_TIME,
        MessageConst.CLUSTER,
        MessageConst.TRANSACTION_PREPARED,
        MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET,
        MessageConst.TRANSACTION_CHECK_TIMES,
        MessageConst.PRODUCER_GROUP,
    }
)


def _flag(view: View, name: str) -> str:
    """A checkbox: ``true`` when ticked."""
    return "true" if view.args.get(name) in ("on", "true") else "false"


def _clusters(view: View) -> list[str]:
    """The cluster named in the form (one the NameServers know), or every cluster when none is named."""
    known = sorted(view.admin.cluster_info().get("clusterAddrTable", {}))
    name = view.text("cluster", default="", max_length=255)
    if name and name not in known:
        raise BadRequest(f"no cluster {name}")
    return [name] if name else known


def _in_each_cluster(view: View, command: Any, args: argparse.Namespace) -> list[str]:
    """An mqadmin command run on the masters of each cluster the form names; the lines it printed."""
    done: list[str] = []
    for cluster in _clusters(view):
        done.extend(command(view.admin, argparse.Namespace(**vars(args), clusterName=cluster)))
    return done


def _checked(view: View, done: list[str], what: str) -> str:
    """What was done, or the first error (the action went on with the other brokers)."""
    if view.admin.errors:
        return f"{what}: {'; '.join(str(e) for e in view.admin.errors)}"
    return "; ".join(done) or what


@action("/topic/update")
def topic_update(view: View) -> Done:
    topic = view.topic()
    args = argparse.Namespace(
        topic=topic,
        readQueueNums=view.number("readQueueNums", 8, 1, _MAX_QUEUES),
        writeQueueNums=view.number("writeQueueNums", 8, 1, _MAX_QUEUES),
        perm=_PERMS[view.choice("perm", tuple(_PERMS))],
        order=_flag(view, "order"),
        brokerAddr=None,
    )
    done = _in_each_cluster(view, update_topic, args)
    return Done(_checked(view, done, f"topic {topic} not updated everywhere"), f"/topic?topic={topic}")


@action("/topic/delete")
def topic_delete(view: View) -> Done:
    topic = view.topic()
    done = [
        line
        for c in _clusters(view)
        for line in delete_topic(view.admin, argparse.Namespace(topic=topic, clusterName=c))
    ]
    return Done(_checked(view, done, f"topic {topic} not deleted everywhere"), "/topics")


@action("/group/update")
def group_update(view: View) -> Done:
    group = view.group()
    args = argparse.Namespace(
        groupName=group,
        consumeEnable="false" if view.args.get("consumeDisable") in ("on", "true") else "true",
        consumeFromMinEnable=_flag(view, "consumeFromMinEnable"),
        consumeBroadcastEnable=_flag(view, "consumeBroadcastEnable"),
        consumeMessageOrderly=_flag(view, "consumeMessageOrderly"),
        retryQueueNums=view.number("retryQueueNums", 1, 1, 64),
        retryMaxTimes=view.number("retryMaxTimes", 16, -1, 64),
        groupRetryPolicy=None,
        brokerId=0,
        whichBrokerWhenConsumeSlowly=1,
        brokerAddr=None,
    )
    done = _in_each_cluster(view, update_sub_group, args)
    return Done(_checked(view, done, f"group {group} not updated everywhere"), f"/group?group={group}")


@action("/group/delete")
def group_delete(view: View) -> Done:
    group = view.group()
    args = argparse.Namespace(groupName=group, removeOffset=_flag(view, "removeOffset"), brokerAddr=None)
    done = _in_each_cluster(view, delete_sub_group, args)
    return Done(_checked(view, done, f"group {group} not deleted everywhere"), "/groups")


def _reset(view: View, timestamp: int, what: str) -> Done:
    group, topic = view.group(), view.topic()
    args = argparse.Namespace(group=group, topic=topic, timestamp=timestamp, force="true")
    table = reset_offset_by_time(view.admin, args)
    moved = ", ".join(
        f"{r['brokerName']} q{r['queueId']} → {r.get('offset', r.get('rollbackOffset'))}" for r in table.rows
    )
    failed = f"offsets of {group} on {topic} not reset everywhere"
    return Done(_checked(view, [f"{what} {group} on {topic}: {moved or 'no queue'}"], failed), f"/group?group={group}")


@action("/group/reset-offset")
def group_reset_offset(view: View) -> Done:
    return _reset(view, view.time("time"), "offsets reset for")


@action("/group/skip-accumulated")
def group_skip_accumulated(view: View) -> Done:
    # Dashboard's skipAccumulate: a reset to -1, the end of every queue.
    return _reset(view, -1, "accumulated messages skipped for")


@action("/message/resend")
def message_resend(view: View) -> Done:
    """CONSUME_MESSAGE_DIRECTLY: the message's broker hands it to one client of the group."""
    offset_msg_id, group = view.offset_msg_id(), view.group()
    client_id = view.text("clientId", max_length=255)
    m = view.message()
    result = view.admin.consume_message_directly(m.store_host, group, client_id, offset_msg_id)
    line = f"{client_id} of {group}: {result.get('consumeResult')} in {result.get('spentTimeMills')} ms"
    if result.get("remark"):
        line += f" ({result['remark']})"
    return Done(line, f"/message?id={offset_msg_id}")


@action("/dlq/resend")
def dlq_resend(view: View) -> Done:
    """Dead letters (``id``, or ``ids``: those a DLQ page shows, Dashboard's batch resend) sent again to the topic
    each came from, with its body, keys, tags and properties."""
    group = view.group()
    ids = [view.offset_msg_id()] if view.args.get("id") else view.offset_msg_ids("ids", MESSAGES_A_PAGE)
    letters = []
    for offset_msg_id in ids:
        m = view.message_by_id(offset_msg_id)
        if m.topic != DLQ_GROUP_TOPIC_PREFIX + group:
            raise BadRequest(f"{offset_msg_id} is not a dead letter of {group}")
        if not m.properties.get(MessageConst.RETRY_TOPIC):
            raise BadRequest(f"{offset_msg_id} does not say which topic it came from")
        letters.append(m)
    lines = []
    for m in letters:
        topic = m.properties[MessageConst.RETRY_TOPIC]
        kept = {k: v for k, v in m.properties.items() if k not in _BOOKKEEPING}
        lines.append(f"resent to {topic}: msgId {view.admin.send_message(topic, m.body, kept)['msgId']}")
    return Done("; ".join(lines), f"/dlq?group={group}")


@action("/message/send")
def message_send(view: View) -> Done:
    topic = view.topic()
    props: dict[str, Any] = {
        MessageConst.TAGS: view.text("tags", default="", max_length=255),
        MessageConst.KEYS: view.text("keys", default="", max_length=1024),
    }
    body = view.text("body", max_length=64 * 1024).encode()
    sent = view.admin.send_message(topic, body, {k: v for k, v in props.items() if v}, group="CONSOLE_PRODUCER")
    return Done(f"sent to {topic}: msgId {sent['msgId']}, offsetMsgId {sent['offsetMsgId']}", f"/topic?topic={topic}")


@action("/broker/write-perm")
def broker_write_perm(view: View) -> Done:
    """A broker's ``brokerPermission`` (as ``mqadmin updateBrokerConfig -k brokerPermission``): the broker
    registers again with it, so routes stop (or start) sending to it, and the value survives restarts."""
    addr = view.broker_addr(view.text("addr", max_length=64))
    enable = view.choice("write", ("enable", "disable")) == "enable"
    perm = PermName.PERM_READ | (PermName.PERM_WRITE if enable else 0)
    view.admin.update_broker_config(addr, "brokerPermission", str(perm))
    return Done(f"write permission of {addr} {'enabled' if enable else 'disabled'} (brokerPermission={perm})", "/")
