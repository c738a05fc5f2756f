"""Unresolved half messages checked back with their producer (TransactionalMessageServiceImpl.check and its listener).

Every ``transactionCheckInterval`` the half queue is read from CID_RMQ_SYS_TRANS's offset. Halves with an
op message are done. A half older than ``transactionTimeOut`` (or its CHECK_IMMUNITY_TIME_IN_SECONDS) is
appended again with TRANSACTION_CHECK_TIMES + 1 and a CHECK_TRANSACTION_STATE naming the new copy goes to
a live producer of its group, which answers with END_TRANSACTION; the scan's offset then moves past the
old copy. After ``transactionCheckMax`` checks, or once older than ``fileReservedTime``, a half goes to
TRANS_CHECK_MAX_TIME_TOPIC instead.

On a DLedger ledger a copy is stored once a majority holds its entry. As Apache's check, which waits for that
commit, the offset moves past a half only once its copy is stored (meanwhile its queue is not checked again);
when a copy fails the next pass reads the queue again from that half.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from gateway.remoting.codes import PermName, RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CheckTransactionStateRequestHeader
from gateway.remoting.message import MessageConst, MessageExt, encode_record, properties_to_string
from gateway.remoting.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from gateway.store.api import PutMessageResult

from ..inner import inner_from_ext, packed_host, put_now, when_put
from .bridge import REMOVE_TAG, QueueRead, TransactionalMessageBridge

if TYPE_CHECKING:
    from ..controller import BrokerController

log = Logger()

MAX_PROCESS_TIME_LIMIT = 60_000  # ms one check pass may take
_OP_BATCH = 32


def _now() -> int:
    return int(time.time() * 1000)


def _long(value: str | None, default: int = -1) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


class TransactionalMessageService:
    """Prepare, resolve and check transactional messages."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.bridge = TransactionalMessageBridge(broker)
        self._awaiting: set[int] = set()  # half queues whose last pass's copies await their commit

    def delete_prepare_message(self, half: MessageExt) -> bool:
        return self.bridge.put_op_message(half)

    # -- check-back

    def check(self) -> None:
        """One check pass over every half queue."""
        cfg = self.broker.config
        for queue_id in self.bridge.half_queue_ids():
            try:
                self._check_queue(queue_id, cfg.transactionTimeOut, cfg.transactionCheckMax)
            except Exception:  # the next pass tries again
                log.failure("transaction check of half queue {queue_id} failed", queue_id=queue_id)

    def _check_queue(self, queue_id: int, timeout: int, check_max: int) -> None:
        if queue_id in self._awaiting:
            return  # read again once the last pass's copies are stored (or not)
        bridge = self.bridge
        start = _now()
        half_offset = bridge.fetch_consume_offset(TRANS_HALF_TOPIC, queue_id)
        op_offset = bridge.fetch_consume_offset(TRANS_OP_HALF_TOPIC, queue_id)
        done_op: list[int] = []
        remove_map: dict[int, int] = {}  # half queue offset -> op queue offset
        op_read = self._fill_op_remove_map(remove_map, queue_id, op_offset, half_offset, done_op)
        null_count = 1
        new_offset = i = half_offset
        copies: list[tuple[int, Deferred[bool]]] = []  # (half queue offset, its copy stored) awaiting commit
        while _now() - start <= MAX_PROCESS_TIME_LIMIT:
            if i in remove_map:
                done_op.append(remove_map.pop(i))
            else:
                read = bridge.read(TRANS_HALF_TOPIC, queue_id, i, 1)
                if not read.messages:
                    null_count += 1
                    if null_count > 2 or read.no_new:
                        break
                    i = new_offset = read.next_begin_offset
                    continue
                half = read.messages[0]
                if self._need_discard(half, check_max) or self._need_skip(half):
                    self._resolve_discard_msg(half)
                    i = new_offset = i + 1
                    continue
                if half.store_timestamp >= start:
                    break  # stored since this pass began
                age = _now() - half.born_timestamp
                immunity = timeout
                immunity_s = half.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
                if immunity_s is not None:
                    seconds = _long(immunity_s)
                    immunity = timeout if seconds == -1 else seconds * 1000
                    if age < immunity:
                        renewed = self._check_prepare_queue_offset(remove_map, done_op, half)
                        if isinstance(renewed, Deferred):
                            copies.append((i, renewed))
                        if renewed:
                            i = new_offset = i + 1
                            continue
                elif 0 <= age < immunity:
                    break  # too young; so is everything after it
                ops = op_read.messages
                if (
                    (ops is None and age > immunity)
                    or (ops is not None and ops[-1].born_timestamp - start > timeout)
                    or age <= -1
                ):
                    put_back = self._put_back_half_msg_queue(half)
                    if put_back is False:
                        break  # the store refuses writes: try again on the next pass
                    if isinstance(put_back, Deferred):
                        copies.append((i, put_back))
                else:
                    # The op queue may yet say this half is done: read further before deciding.
                    op_read = self._fill_op_remove_map(
                        remove_map, queue_id, op_read.next_begin_offset, half_offset, done_op
                    )
                    continue
            i = new_offset = i + 1
        if copies:
            self._when_copies_stored(queue_id, copies, new_offset)
            new_offset = copies[0][0]
        if new_offset != half_offset:
            bridge.update_consume_offset(TRANS_HALF_TOPIC, queue_id, new_offset)
        new_op_offset = op_offset
        for offset in sorted(done_op):
            if offset != new_op_offset:
                break
            new_op_offset += 1
        if new_op_offset != op_offset:
            bridge.update_consume_offset(TRANS_OP_HALF_TOPIC, queue_id, new_op_offset)

    def _when_copies_stored(self, queue_id: int, copies: list[tuple[int, Deferred[bool]]], new_offset: int) -> None:
        """Move the half queue's offset to ``new_offset`` once every copy is stored, else to the first half whose
        copy failed; the queue is not checked meanwhile."""
        self._awaiting.add(queue_id)

        def settled(results: list[tuple[bool, bool]]) -> None:
            self._awaiting.discard(queue_id)
            failed = [i for (i, _), (_, stored) in zip(copies, results, strict=True) if not stored]
            offset = failed[0] if failed else new_offset
            if failed:
                log.warn(
                    "half message at offset {offset} of half queue {queue_id} not put back: checked again",
                    offset=offset,
                    queue_id=queue_id,
                )
            if offset > self.bridge.fetch_consume_offset(TRANS_HALF_TOPIC, queue_id):
                self.bridge.update_consume_offset(TRANS_HALF_TOPIC, queue_id, offset)

        DeferredList([d for _, d in copies], consumeErrors=True).addCallback(settled)

    def _fill_op_remove_map(
        self, remove_map: dict[int, int], queue_id: int, op_offset: int, min_half_offset: int, done_op: list[int]
    ) -> QueueRead:
        """Read op messages from ``op_offset``: ops for halves before ``min_half_offset`` are done, the others
        go into ``remove_map``."""
        read = self.bridge.read(TRANS_OP_HALF_TOPIC, queue_id, op_offset, _OP_BATCH)
        if read.messages is None:
            if not read.no_new:  # offset illegal or nothing matched: skip ahead
                self.bridge.update_consume_offset(TRANS_OP_HALF_TOPIC, queue_id, read.next_begin_offset)
            return read
        for op in read.messages:
            half_offset = _long(op.body.decode("utf-8", "replace"))
            if op.tags != REMOVE_TAG:
                log.error("op message with an illegal tag: {op}", op=op.msg_id)
            elif half_offset < min_half_offset:
                done_op.append(op.queue_offset)
            else:
                remove_map[half_offset] = op.queue_offset
        return read

    def _need_discard(self, half: MessageExt, check_max: int) -> bool:
        times = half.properties.get(MessageConst.TRANSACTION_CHECK_TIMES)
        count = 1
        if times is not None:
            count = _long(times)
            if count >= check_max:
                return True
            count += 1
        half.properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(count)
        return False

    def _need_skip(self, half: MessageExt) -> bool:
        return _now() - half.born_timestamp > self.broker.store_config.fileReservedTime * 3600 * 1000

    def _check_prepare_queue_offset(
        self, remove_map: dict[int, int], done_op: list[int], half: MessageExt
    ) -> bool | Deferred[bool]:
        """A half within its immunity time: done if its first copy's op arrived, else appended again (whether
        the copy is stored: on a DLedger ledger, once committed)."""
        prepared = half.properties.get(MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET)
        if prepared is not None:
            first = _long(prepared)
            if first == -1:
                return False
            if first in remove_map:
                done_op.append(remove_map.pop(first))
                return True
        return when_put(self.bridge.renew_half_message(half, immunity=True), lambda result: result.ok)

    def _put_back_half_msg_queue(self, half: MessageExt) -> bool | Deferred[bool]:
        """Append ``half`` again, then check it back with its producer as the new copy (offsets and id); on a
        DLedger ledger once the copy is committed. False when the store refuses the copy."""
        return when_put(self.bridge.renew_half_message(half), lambda result: self._check_back_copy(result, half))

    def _check_back_copy(self, result: PutMessageResult, half: MessageExt) -> bool:
        if not result.ok or result.append is None:
            log.error("half message {id} not put back: {status}", id=half.msg_id, status=result.status)
            return False
        half.queue_offset = result.append.logics_offset
        half.commitlog_offset = result.append.wrote_offset
        half.msg_id = result.append.msg_id
        self._resolve_half_msg(half)
        return True

    def _resolve_half_msg(self, half: MessageExt) -> None:
        """CHECK_TRANSACTION_STATE (oneway) to a live producer of the half's group (sendCheckMessage)."""
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        channel = self.broker.producers.available_channel(group)
        if channel is None:
            log.warn("check transaction failed, no producer of group {group} is online", group=group)
            return
        uniq = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=half.commitlog_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=half.msg_id,
        )
        # The body is the half message as its producer sent it: real topic and queue.
        body = encode_record(
            topic=half.properties.get(MessageConst.REAL_TOPIC, "").encode(),
            queue_id=_long(half.properties.get(MessageConst.REAL_QUEUE_ID), 0),
            flag=half.flag,
            queue_offset=half.queue_offset,
            physical_offset=half.commitlog_offset,
            sys_flag=half.sys_flag,
            born_timestamp=half.born_timestamp,
            born_host=packed_host(half.born_host),
            store_timestamp=half.store_timestamp,
            store_host=packed_host(half.store_host),
            reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half.prepared_transaction_offset,
            body=half.body,
            properties=properties_to_string(half.properties).encode(),
            crc=half.body_crc,
        )
        request = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE, header.encode(), body, oneway=True, language="JAVA"
        )
        channel.invoke_oneway(request)

    def _resolve_discard_msg(self, half: MessageExt) -> None:
        """Checked too often or too old: keep it in TRANS_CHECK_MAX_TIME_TOPIC for an operator."""
        log.error(
            "half message {id} checked too many times, moved to {topic}",
            id=half.msg_id,
            topic=TRANS_CHECK_MAX_TIME_TOPIC,
        )
        self.broker.topics.create_topic_in_send_message_back_method(
            TRANS_CHECK_MAX_TIME_TOPIC, 1, PermName.PERM_READ | PermName.PERM_WRITE
        )
        inner = inner_from_ext(half, TRANS_CHECK_MAX_TIME_TOPIC, 0, dict(half.properties))
        result = put_now(self.broker.store, inner)
        if not result.ok:
            log.error("half message {id} not moved: {status}", id=half.msg_id, status=result.status)
