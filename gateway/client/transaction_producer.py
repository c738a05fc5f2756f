"""TransactionProducer (TransactionMQProducer): half message, local transaction, then commit or roll back.

``send_message_in_transaction`` stores the message as a half message (invisible to consumers), runs the
listener's ``execute_local_transaction``, and tells the broker the outcome with END_TRANSACTION. An
outcome of UNKNOW (or a lost END_TRANSACTION) is settled later: the broker asks a producer of the group
with CHECK_TRANSACTION_STATE, answered from the listener's ``check_local_transaction``.

Listener methods run in the reactor thread and may return a state, a Deferred or a coroutine; an
exception counts as UNKNOW.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger

from gateway.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from gateway.remoting.message import Message, MessageConst, MessageExt, MessageSysFlag, decode_offset_message_id

from .errors import MQClientError
from .producer import Producer, SendResult, SendStatus

log = Logger()


class LocalTransactionState(Enum):
    COMMIT_MESSAGE = MessageSysFlag.TRANSACTION_COMMIT_TYPE
    ROLLBACK_MESSAGE = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    UNKNOW = MessageSysFlag.TRANSACTION_NOT_TYPE  # sic: RocketMQ's spelling


StateResult = LocalTransactionState | Deferred[LocalTransactionState] | Awaitable[LocalTransactionState]


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> StateResult: ...

    def check_local_transaction(self, msg: MessageExt) -> StateResult: ...


@dataclass(slots=True)
class TransactionSendResult:
    """The half message's send result and what the local transaction said."""

    send_result: SendResult
    local_transaction_state: LocalTransactionState


class TransactionProducer(Producer):
    """A producer group whose messages are committed by local transactions; see the module doc."""

    def __init__(self, group: str, *args: Any, transaction_listener: TransactionListener, **kwargs: Any) -> None:
        super().__init__(group, *args, **kwargs)
        self.transaction_listener = transaction_listener
        self._known_brokers: set[str] = set()

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> Deferred[TransactionSendResult]:
        return Deferred.fromCoroutine(self._send_in_transaction(msg, arg))

    async def _send_in_transaction(self, msg: Message, arg: Any) -> TransactionSendResult:
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)  # a half message cannot be delayed
        msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        try:
            result: SendResult = await self.send(msg)
        except Exception as e:
            raise MQClientError(f"send message Exception: {e}") from e
        if result.queue.broker_name not in self._known_brokers:
            # Check-backs need this broker to know our group: say hello now rather than at the next heartbeat.
            self._known_brokers.add(result.queue.broker_name)
            await self.client.send_heartbeat_to_all_brokers()
        state = LocalTransactionState.UNKNOW
        remark = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await maybeDeferred(self.transaction_listener.execute_local_transaction, msg, arg) or state
            except Exception as e:
                log.failure("local transaction of {id} failed", id=result.msg_id)
                remark = f"executeLocalTransactionBranch exception: {e!r}"
        else:  # stored, but not as safely as asked: do not commit it
            state = LocalTransactionState.ROLLBACK_MESSAGE
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=decode_offset_message_id(result.offset_msg_id)[1],
            commit_or_rollback=state.value,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id,
            bname=result.queue.broker_name,
        )
        addr = self.client.find_broker_addr_in_publish(result.queue.broker_name)
        if addr is None:
            log.warn(
                "transaction {id} not ended: no address for {broker}", id=result.msg_id, broker=result.queue.broker_name
            )
        else:
            await self.client.api.end_transaction_oneway(addr, header, remark)
            if self.trace is not None:
                self.trace.end_transaction(msg, result.msg_id, addr, state.name, False)
        return TransactionSendResult(result, state)

    def check_transaction_state(
        self, channel: Any, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """Answer a broker's CHECK_TRANSACTION_STATE with END_TRANSACTION (fromTransactionCheck) on that broker."""
        d = Deferred.fromCoroutine(self._check_transaction_state(channel.peer, msg, header))
        d.addErrback(lambda f: log.failure("transaction check of {id} not answered", f, id=header.msg_id))

    async def _check_transaction_state(
        self, addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        remark = None
        try:
            state = await maybeDeferred(self.transaction_listener.check_local_transaction, msg)
        except Exception as e:
            log.failure("check of local transaction {id} failed", id=header.msg_id)
            state, remark = LocalTransactionState.UNKNOW, f"checkLocalTransactionState Exception: {e!r}"
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=(state or LocalTransactionState.UNKNOW).value,
            from_transaction_check=True,
            msg_id=msg.uniq_key or msg.msg_id,
            transaction_id=header.transaction_id,
            bname=header.bname,
        )
        await self.client.api.end_transaction_oneway(addr, end, remark)
        if self.trace is not None:
            self.trace.end_transaction(msg, end.msg_id, addr, (state or LocalTransactionState.UNKNOW).name, True)
