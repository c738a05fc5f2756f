"""RocketMQ-compatible message store: commitlog, consume queues, index, checkpoint, recovery, flushing, cleaning.

The on-disk layout is RocketMQ's own (see shared/rocketmq-wire.md §6), so a store directory written by
Java can be read here and the other way round.  ``flush`` and ``clean_service`` (Twisted) are imported separately.
"""

from .api import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStore,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    RecoveryReport,
)
from .config import StoreConfig
from .mapped_file import StoreLoadError
from .message_store import DefaultMessageStore
from .paths import StorePathError

__all__ = [
    "AppendMessageResult",
    "DefaultMessageStore",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageExtBrokerInner",
    "MessageStore",
    "PutMessageResult",
    "PutMessageStatus",
    "QueryMessageResult",
    "RecoveryReport",
    "StoreConfig",
    "StoreLoadError",
    "StorePathError",
]
