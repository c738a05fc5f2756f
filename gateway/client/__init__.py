"""A Python client speaking RocketMQ 4.9.8's remoting protocol, Twisted-native (see :mod:`.blocking` for plain
threaded code).

Names follow RocketMQ's: Producer (DefaultMQProducer), PullConsumer (DefaultMQPullConsumer), PushConsumer
(DefaultMQPushConsumer), ClientInstance (MQClientInstance); Admin creates topics and reads routes.
"""

from gateway.remoting.bodies import ConsumeFromWhere, MessageModel, MessageQueue
from gateway.remoting.message import Message, MessageExt

from .admin import Admin, MQAdmin
from .consume_orderly import ConsumeOrderlyStatus
from .consumer import PullConsumer, PullResult, PullStatus
from .errors import MQBrokerError, MQClientError
from .instance import ClientInstance
from .message_selector import MessageSelector
from .producer import Producer, SendResult, SendStatus, build_message
from .push_consumer import ConsumeStatus, PushConsumer
from .rebalance import allocate_averagely
from .transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "Admin",
    "ClientInstance",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "LocalTransactionState",
    "MQAdmin",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "allocate_averagely",
    "build_message",
]
