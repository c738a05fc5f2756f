"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the queue locks orderly consumers hold (AdminBrokerProcessor's
lockBatchMQ / unlockBatchMQ)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.remoting import fastjson
from gateway.remoting.bodies import LockBatchRequestBody, LockBatchResponseBody
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController


class LockBatchProcessor:
    """Answers with the queues granted; unlocking always succeeds (only the caller's own locks go)."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq, RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq}

    def lock_batch_mq(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.from_json(fastjson.loads(request.body))
        granted = self.broker.rebalance_locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.response(body=fastjson.dumps(LockBatchResponseBody(sorted(granted))))

    def unlock_batch_mq(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.from_json(fastjson.loads(request.body))
        self.broker.rebalance_locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.response(ResponseCode.SUCCESS)
