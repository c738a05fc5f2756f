"""RecallMessageHandle (5.3): what a delayed message's send answers so that its producer can withdraw it.

Version 1 is URL-safe base64 (padded) of "v1 <topic> <brokerName> <deliver ms + 1> <unique id>", joined by
spaces.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

VERSION_1 = "v1"


class InvalidRecallHandle(ValueError):
    """A handle that does not decode (Apache's DecoderException, with its words)."""

    def __init__(self) -> None:
        super().__init__("recall handle is invalid")


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str  # the delivery time in ms as a string (Apache parses it only when recalling)
    message_id: str  # the message's unique (client) id

    def encode(self) -> str:
        raw = " ".join((VERSION_1, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        """RecallMessageHandle.decodeHandle; InvalidRecallHandle when it is not a v1 handle."""
        if not handle:
            raise InvalidRecallHandle
        try:
            raw = base64.urlsafe_b64decode(handle.encode()).decode()
        except (binascii.Error, UnicodeError, ValueError):
            raise InvalidRecallHandle from None
        items = raw.split(" ")
        if items[0] != VERSION_1 or len(items) < 5:
            raise InvalidRecallHandle
        return cls(items[1], items[2], items[3], items[4])


def timer_delete_key(real_topic: str, unique_id: str) -> str:
    """TimerMessageStore.buildDeleteKey: what a recall marker's TIMER_DEL_UNIQKEY names."""
    return f"{real_topic}+{unique_id}"
