"""END_TRANSACTION (EndTransactionProcessor): a producer commits or rolls back a half message.

The request is oneway, so whatever is answered below is for the log and the tests: a commit stores the
message in its real topic (sysFlag COMMIT, delay levels honoured) and then marks the half done; a rollback
only marks it done; "unknown" (0) leaves it for the check-back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import EndTransactionRequestHeader
from gateway.remoting.message import MessageConst, MessageExt, MessageSysFlag
from gateway.store.config import SLAVE

from ..inner import inner_from_ext, look_message, when_put
from ..schedule import handle_schedule_message, int_property
from .send import put_result_response

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

log = Logger()

_RESOLVING = (MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)


class EndTransactionProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.END_TRANSACTION: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | Deferred[Any] | None:
        broker = self.broker
        if broker.store_config.brokerRole == SLAVE:
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE)
        header = EndTransactionRequestHeader.decode(request.ext_fields)
        kind = header.commit_or_rollback
        if kind not in _RESOLVING:
            if header.from_transaction_check:
                log.warn(
                    "check-back of {msg_id} from {peer}: the producer does not know ({remark})",
                    msg_id=header.msg_id,
                    peer=channel.peer,
                    remark=request.remark,
                )
            return None
        half = look_message(broker.store, header.commit_log_offset)
        if half is None:
            return request.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        remark = _check_prepare_message(half, header)
        if remark is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, remark)
        if kind != MessageSysFlag.TRANSACTION_COMMIT_TYPE:
            return self._resolved(request, half)
        # On a DLedger ledger the commit's put is decided once a majority holds it.
        return when_put(self._commit(request, half, header), lambda response: self._resolved(request, half, response))

    def _resolved(
        self, request: RemotingCommand, half: MessageExt, committed: RemotingCommand | None = None
    ) -> RemotingCommand:
        """The half message is done with, unless its commit failed (``committed``: the commit's answer)."""
        if committed is not None and committed.code != ResponseCode.SUCCESS:
            return committed
        self.broker.transactions.delete_prepare_message(half)
        return request.response(ResponseCode.SUCCESS)

    def _commit(
        self, request: RemotingCommand, half: MessageExt, header: EndTransactionRequestHeader
    ) -> RemotingCommand | Deferred[RemotingCommand]:
        """Store the message in its real topic (endMessageTransaction + sendFinalMessage)."""
        props = dict(half.properties)
        topic = props.pop(MessageConst.REAL_TOPIC, "")
        queue_id = int_property(props.pop(MessageConst.REAL_QUEUE_ID, None))
        props.pop(MessageConst.TRANSACTION_PREPARED, None)
        sys_flag = MessageSysFlag.reset_transaction_value(half.sys_flag, MessageSysFlag.TRANSACTION_COMMIT_TYPE)
        msg = inner_from_ext(
            half, topic, queue_id, props, sys_flag=sys_flag, prepared_transaction_offset=header.commit_log_offset
        )
        remark = handle_schedule_message(self.broker, msg, props)
        if remark is not None:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, remark)
        return put_result_response(request, self.broker.store.put_message(msg))


def _check_prepare_message(half: MessageExt, header: EndTransactionRequestHeader) -> str | None:
    """The record must be the half message the producer names (checkPrepareMessage)."""
    if half.properties.get(MessageConst.PRODUCER_GROUP) != header.producer_group:
        return "The producer group wrong"
    if half.queue_offset != header.tran_state_table_offset:
        return "The transaction state table offset wrong"
    if half.commitlog_offset != header.commit_log_offset:
        return "The commit log offset wrong"
    return None
