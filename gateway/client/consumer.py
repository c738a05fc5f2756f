"""Pulling (PullAPIWrapper) and the pull consumer (DefaultMQPullConsumer), where the caller drives offsets."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred

from gateway.remoting.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from gateway.remoting.codes import ResponseCode
from gateway.remoting.headers import PullMessageRequestHeader, PullMessageResponseHeader, PullSysFlag
from gateway.remoting.message import MessageConst, MessageExt, decode_records

from .admin import MQAdmin
from .instance import MASTER_ID, ClientInstance, resolve_client
from .message_selector import MessageSelector
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from .security import ClientSecurity


class PullStatus(Enum):
    FOUND = ResponseCode.SUCCESS
    NO_NEW_MSG = ResponseCode.PULL_NOT_FOUND
    NO_MATCHED_MSG = ResponseCode.PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = ResponseCode.PULL_OFFSET_MOVED


@dataclass(slots=True)
class PullResult:
    """One pull: continue at ``next_begin_offset``; ``messages`` already filtered by exact tag."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]


def make_offset_store(
    client: ClientInstance, group: str, model: MessageModel, directory: str | os.PathLike[str] | None
) -> OffsetStore:
    """Broker-kept offsets for CLUSTERING, a local file for BROADCASTING (default dir ~/.rocketmq_offsets)."""
    if model is MessageModel.BROADCASTING:
        return LocalFileOffsetStore(directory or Path.home() / ".rocketmq_offsets", client.client_id, group)
    return RemoteBrokerOffsetStore(client, group)


class PullAPIWrapper:
    """PULL_MESSAGE to the queue's broker and the client-side half of filtering."""

    def __init__(self, client: ClientInstance, group: str) -> None:
        self.client = client
        self.group = group
        # pullFromWhichNodeTable: the broker id each queue's last pull answer suggested (slaveReadEnable).
        self.pull_from_which_node: dict[MessageQueue, int] = {}

    async def pull_kernel(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        max_nums: int,
        sys_flag: int,
        commit_offset: int,
        suspend_timeout: float,
        timeout: float,
    ) -> PullResult:
        """Pull; the expression travels only when ``sys_flag`` has SUBSCRIPTION (else the heartbeat's counts)."""
        addr = await self.client.find_broker_addr(mq, self.pull_from_which_node.get(mq, MASTER_ID))
        header = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=int(suspend_timeout * 1000),
            subscription=sub.sub_string if sys_flag & PullSysFlag.SUBSCRIPTION else None,
            sub_version=sub.sub_version,
            expression_type=sub.expression_type,
            bname=mq.broker_name,
        )
        response = await self.client.api.pull_message(addr, header, timeout)
        rh = PullMessageResponseHeader.decode(response.ext_fields)
        self.pull_from_which_node[mq] = rh.suggest_which_broker_id or MASTER_ID
        status = PullStatus(response.code)
        msgs = decode_records(response.body) if status is PullStatus.FOUND else []
        if sub.tags_set and not sub.class_filter_mode:
            # The broker matched tag hashes only; hashes collide, tags do not.
            tags = set(sub.tags_set)
            msgs = [m for m in msgs if m.tags in tags]
        for m in msgs:
            m.properties[MessageConst.MIN_OFFSET] = str(rh.min_offset)
            m.properties[MessageConst.MAX_OFFSET] = str(rh.max_offset)
        return PullResult(status, rh.next_begin_offset, rh.min_offset, rh.max_offset, msgs)


class PullConsumer(MQAdmin):
    """A consumer that pulls queues explicitly (DefaultMQPullConsumer); times in seconds.

    Offsets set with :meth:`update_consume_offset` are kept in memory and persisted every 5 s, by
    :meth:`persist_consumer_offset` and at shutdown.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        client: ClientInstance | None = None,
        reactor: Any = None,
        security: ClientSecurity | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        register_topics: Iterable[str] = (),
        offset_store_dir: str | os.PathLike[str] | None = None,
        consumer_pull_timeout: float = 10.0,
        broker_suspend_max_time: float = 20.0,
        consumer_timeout_when_suspend: float = 30.0,
    ) -> None:
        self.group = group
        self.client = resolve_client(namesrv_addr, client, reactor, security)
        self.message_model = message_model
        self.register_topics = set(register_topics)
        self.consumer_pull_timeout = consumer_pull_timeout
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend
        self.offset_store = make_offset_store(self.client, group, message_model, offset_store_dir)
        self._pull_api = PullAPIWrapper(self.client, group)

    # -- lifecycle

    def start(self) -> Deferred[None]:
        """Register the group and heartbeat."""
        self.offset_store.load()
        self.client.register_consumer(self)
        return Deferred.fromCoroutine(self.client.send_heartbeat_to_all_brokers())

    def shutdown(self) -> Deferred[None]:
        """Persist offsets, unregister the group."""

        async def shutdown() -> None:
            await self.persist_consumer_offset()
            await self.client.unregister_consumer(self.group)

        return Deferred.fromCoroutine(shutdown())

    # -- MQConsumerInner

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=self.message_model,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subscription_data_set=[SubscriptionData.build(t, SubscriptionData.SUB_ALL) for t in self.register_topics],
        )

    def update_topic_subscribe_info(self, topic: str, queues: set[MessageQueue]) -> None:
        pass  # queues are the caller's business

    def do_rebalance(self) -> None:
        pass  # likewise

    def persist_consumer_offset(self) -> Deferred[Any]:
        """Persist every offset set so far; fires once the updates are written."""
        return self.offset_store.persist_all(set(self.offset_store.offset_table))

    # -- pulling and offsets

    def pull(
        self,
        mq: MessageQueue,
        expression: str | MessageSelector,
        offset: int,
        max_nums: int,
        *,
        block: bool = False,
    ) -> Deferred[PullResult]:
        """Pull up to ``max_nums`` messages from ``offset`` matching ``expression`` (``*``, ``a||b`` or a
        MessageSelector); ``block`` holds the request on the broker until a message arrives (long polling)."""
        if offset < 0:
            raise ValueError("offset < 0")
        if max_nums <= 0:
            raise ValueError("max_nums <= 0")
        selector = expression if isinstance(expression, MessageSelector) else MessageSelector.by_tag(expression)
        sub = selector.subscription_data(mq.topic)
        sys_flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if block else 0)
        timeout = self.consumer_timeout_when_suspend if block else self.consumer_pull_timeout
        return Deferred.fromCoroutine(
            self._pull_api.pull_kernel(mq, sub, offset, max_nums, sys_flag, 0, self.broker_suspend_max_time, timeout)
        )

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = True) -> Deferred[int]:
        """The group's offset of ``mq``: from the broker (or offset file), or from memory first;
        -1 when never committed."""

        async def fetch() -> int:
            if not from_store and mq in self.offset_store.offset_table:
                return self.offset_store.read_offset(mq)
            return await self.offset_store.read_offset_from_store(mq)

        return Deferred.fromCoroutine(fetch())

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Set the group's offset of ``mq`` (persisted later, see the class doc)."""
        self.offset_store.update_offset(mq, offset, False)
