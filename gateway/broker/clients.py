"""Who is connected: consumer groups (with the subscriptions their heartbeats carry) and producer groups.

A consumer group's membership changes (a channel joins or leaves, a subscription changes) are reported
to ``on_consumer_ids_changed`` so the broker can tell the group's clients to rebalance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.remoting.bodies import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ClientChannelInfo:
    channel: RemotingProtocol
    client_id: str
    language: str
    version: int
    last_update_timestamp: int = field(default_factory=_now_ms)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    channels: dict[RemotingProtocol, ClientChannelInfo] = field(default_factory=dict)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_timestamp: int = field(default_factory=_now_ms)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_subscription(self, topic: str) -> SubscriptionData | None:
        return self.subscription_table.get(topic)

    def update_channel(self, info: ClientChannelInfo) -> bool:
        """Add or refresh a channel; True when it is new to the group."""
        old = self.channels.get(info.channel)
        if old is None:
            self.channels[info.channel] = info
            return True
        old.last_update_timestamp = _now_ms()
        if old.client_id != info.client_id:
            old.client_id = info.client_id
        return False

    def update_subscription(self, subs: list[SubscriptionData]) -> bool:
        """Replace subscriptions as Java does: newer subVersion wins; topics no longer listed go away."""
        changed = False
        seen = set()
        for sub in subs:
            seen.add(sub.topic)
            old = self.subscription_table.get(sub.topic)
            if old is None:
                self.subscription_table[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscription_table[sub.topic] = sub
        for topic in [t for t in self.subscription_table if t not in seen]:
            del self.subscription_table[topic]
            changed = True
        self.last_update_timestamp = _now_ms()
        return changed


class ConsumerManager:
    """Consumer groups by name (ConsumerManager)."""

    def __init__(self, on_consumer_ids_changed: Callable[[str, list[RemotingProtocol]], None] | None = None):
        self.table: dict[str, ConsumerGroupInfo] = {}
        self.on_consumer_ids_changed = on_consumer_ids_changed

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subs: list[SubscriptionData],
        notify: bool,
    ) -> bool:
        cg = self.table.get(group)
        if cg is None:
            cg = self.table[group] = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
        cg.consume_type, cg.message_model, cg.consume_from_where = consume_type, message_model, consume_from_where
        r1 = cg.update_channel(info)
        r2 = cg.update_subscription(subs)
        if (r1 or r2) and notify:
            self._notify(cg)
        return r1 or r2

    def unregister_consumer(self, group: str, channel: RemotingProtocol, notify: bool) -> None:
        cg = self.table.get(group)
        if cg is None or cg.channels.pop(channel, None) is None:
            return
        if not cg.channels:
            del self.table[group]
        elif notify:
            self._notify(cg)

    def channel_closed(self, channel: RemotingProtocol, notify_groups: Callable[[str], bool]) -> None:
        """Remove a closed channel from every group; tell the others in each group."""
        for group, cg in list(self.table.items()):
            if cg.channels.pop(channel, None) is None:
                continue
            if not cg.channels:
                del self.table[group]
            elif notify_groups(group):
                self._notify(cg)

    def scan_not_active(self, expire_ms: int, notify_groups: Callable[[str], bool]) -> list[RemotingProtocol]:
        """Drop channels not heard from for ``expire_ms``; returns them so the caller can close them."""
        now = _now_ms()
        expired = []
        for cg in self.table.values():
            for ch, info in list(cg.channels.items()):
                if now - info.last_update_timestamp > expire_ms:
                    expired.append(ch)
        for ch in expired:
            self.channel_closed(ch, notify_groups)
        return expired

    def _notify(self, cg: ConsumerGroupInfo) -> None:
        if self.on_consumer_ids_changed is not None:
            self.on_consumer_ids_changed(cg.group_name, list(cg.channels))


class ProducerManager:
    """Producer groups by name: group → channel → client info."""

    def __init__(self) -> None:
        self.table: dict[str, dict[RemotingProtocol, ClientChannelInfo]] = {}

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        channels = self.table.setdefault(group, {})
        old = channels.get(info.channel)
        if old is None:
            channels[info.channel] = info
        else:
            old.last_update_timestamp = _now_ms()

    def unregister_producer(self, group: str, channel: RemotingProtocol) -> None:
        channels = self.table.get(group)
        if channels is not None:
            channels.pop(channel, None)
            if not channels:
                del self.table[group]

    def channel_closed(self, channel: RemotingProtocol) -> None:
        for group in list(self.table):
            self.unregister_producer(group, channel)

    def scan_not_active(self, expire_ms: int) -> list[RemotingProtocol]:
        now = _now_ms()
        expired = [
            ch
            for channels in self.table.values()
            for ch, info in channels.items()
            if now - info.last_update_timestamp > expire_ms
        ]
        for ch in expired:
            self.channel_closed(ch)
        return expired

    def find_channel(self, client_id: str) -> RemotingProtocol | None:
        """A live channel of the client ``client_id`` in any group (request/reply pushes replies there)."""
        for channels in self.table.values():
            for ch, info in channels.items():
                if info.client_id == client_id and ch.connected_:
                    return ch
        return None

    def available_channel(self, group: str) -> RemotingProtocol | None:
        """A live channel of the group (for server-initiated requests such as transaction checks)."""
        for ch in self.table.get(group, {}):
            if ch.connected_:
                return ch
        return None
