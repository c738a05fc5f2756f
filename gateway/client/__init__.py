"""A Python client speaking RocketMQ 4.9.8's remoting protocol, Twisted-native (see :mod:`.blocking` for plain
threaded code).

Names follow RocketMQ's: Producer (DefaultMQProducer), PullConsumer (DefaultMQPullConsumer), PushConsumer
(DefaultMQPushConsumer), ClientInstance (MQClientInstance); Admin creates topics and reads routes.
"""

from gateway.remoting.bodies import ConsumeFromWhere, MessageModel, MessageQueue
from gateway.remoting.message import Message, MessageExt

from .admin import Admin, MQAdmin
from .consumer import PullConsumer, PullResult, PullStatus
from .errors import MQBrokerError, MQClientError
from .instance import ClientInstance
from .producer import Producer, SendResult, SendStatus, build_message
from .push_consumer import ConsumeStatus, PushConsumer
from .rebalance import allocate_averagely

__all__ = [
    "Admin",
    "ClientInstance",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "MQAdmin",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "allocate_averagely",
    "build_message",
]
