"""Auto-renew of receipt handles, as Apache 5.3.3's proxy does it (DefaultReceiptHandleManager,
ReceiptHandleProcessor, RenewStrategyPolicy).

A PushConsumer receives with ``auto_renew``: its messages are popped for ``defaultInvisibleTimeMills`` and the
proxy, not the client, keeps them invisible while the listener runs. Every ``renewSchedulePeriodMillis`` a
scan changes the invisible time of each message due within ``renewAheadTimeMillis`` (1 min, then 3, 5, 10, 30
min, then hourly), until the client acks or nacks it (AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue take the tracked message out and use its latest handle), the client goes away
(its messages come back after ``invisibleTimeMillisWhenClear``), or ``renewMaxTimeMillis`` passed (the
message comes back after its group's retry delay). One client's tracked messages are bounded by
``maxReceiptHandlesPerClient``; renewals in flight by :data:`MAX_RENEWS_IN_FLIGHT`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.client.errors import MQBrokerError
from gateway.remoting.bodies import DEFAULT_RETRY_STEPS_MS

from .convert import ProxyError
from .receipt_handle import ReceiptHandle

if TYPE_CHECKING:
    from .config import ProxyConfig

log = Logger()

# RenewStrategyPolicy: the invisible time of the n-th renewal.
RENEW_POLICY_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
# Apache's renewThreadPoolQueueCapacity: renewals waiting for a broker at once; the rest wait for the next scan.
MAX_RENEWS_IN_FLIGHT = 300

# (handle, group, topic, invisible time in ms) -> the message's new handle.
ChangeInvisibleTime = Callable[[ReceiptHandle, str, str, int], Awaitable[ReceiptHandle]]


def renew_delay(renew_times: int) -> int:
    """RenewStrategyPolicy.nextDelayDuration."""
    return RENEW_POLICY_MS[min(max(renew_times, 0), len(RENEW_POLICY_MS) - 1)]


def retry_delay(reconsume_times: int) -> int:
    """CustomizedRetryPolicy.nextDelayDuration of a group's default policy: a message out of renewals comes back
    after it."""
    return DEFAULT_RETRY_STEPS_MS[min(max(reconsume_times, 0) + 2, len(DEFAULT_RETRY_STEPS_MS) - 1)]


@dataclass(slots=True)
class MessageReceiptHandle:
    """A message a push consumer holds: its latest handle and how often it was renewed."""

    group: str
    topic: str
    message_id: str
    handle: ReceiptHandle
    reconsume_times: int
    consume_timestamp: int  # ms, when it was received
    renew_times: int = 0
    renew_retry_times: int = 0
    # Set while a renewal waits for the broker: who waits for its new handle.
    waiters: list[Deferred[None]] | None = field(default=None, repr=False)

    def settled(self) -> Deferred[None]:
        """Fires once no renewal of this message is in flight (at once if none is)."""
        d: Deferred[None] = Deferred()
        if self.waiters is None:
            d.callback(None)
        else:
            self.waiters.append(d)
        return d


def handle_key(handle: ReceiptHandle) -> tuple[str, int, int]:
    """ReceiptHandleGroup.HandleKey: a message is its broker, queue and queue offset."""
    return handle.broker_name, handle.queue_id, handle.offset


class ReceiptHandleManager:
    """The messages push consumers hold, per (client id, group); ``online(client_id, group)`` says whether the
    client still consumes as that group; ``change`` changes a message's invisible time at its broker."""

    def __init__(
        self,
        config: ProxyConfig,
        clock: Any,
        change: ChangeInvisibleTime,
        online: Callable[[str, str], bool],
    ) -> None:
        self.config = config
        self.clock = clock
        self.change = change
        self.online = online
        self.groups: dict[tuple[str, str], dict[tuple[str, int, int], MessageReceiptHandle]] = {}
        self.in_flight = 0
        self._full: set[tuple[str, str]] = set()  # groups warned about being full, until they have room again
        self._scan = LoopingCall(self.scan)
        self._scan.clock = clock

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def start(self) -> None:
        if self.config.enableProxyAutoRenew:
            self._scan.start(self.config.renewSchedulePeriodMillis / 1000, now=False)

    def stop(self) -> Deferred[Any]:
        """Stop renewing; every held message comes back soon (Apache's clearAllHandle)."""
        if self._scan.running:
            self._scan.stop()
        return DeferredList([self.clear_group(key) for key in list(self.groups)], consumeErrors=True)

    # -- tracking

    def add(
        self, client_id: str, group: str, topic: str, message_id: str, handle: ReceiptHandle, reconsume_times: int
    ) -> bool:
        """Renew this message until it is acked; False when the client holds too many to track another."""
        key = (client_id, group)
        messages = self.groups.setdefault(key, {})
        if len(messages) >= self.config.maxReceiptHandlesPerClient:
            if key not in self._full:
                self._full.add(key)
                log.warn(
                    "client {client} of group {group} holds maxReceiptHandlesPerClient={limit} messages: further "
                    "ones are not renewed",
                    client=client_id,
                    group=group,
                    limit=self.config.maxReceiptHandlesPerClient,
                )
            return False
        self._full.discard(key)
        messages[handle_key(handle)] = MessageReceiptHandle(
            group, topic, message_id, handle, reconsume_times, self.now_ms()
        )
        return True

    async def remove(self, client_id: str, group: str, message_id: str, handle: ReceiptHandle) -> ReceiptHandle:
        """Stop renewing the message of ``handle`` (the client acks or nacks it): its latest handle, after a
        renewal in flight; ``handle`` itself when it is not tracked."""
        key = (client_id, group)
        messages = self.groups.get(key)
        entry = messages.get(handle_key(handle)) if messages is not None else None
        if messages is None or entry is None or entry.message_id != message_id:
            return handle
        del messages[handle_key(handle)]
        if not messages:
            del self.groups[key]
        await entry.settled()
        return entry.handle

    def _drop(self, key: tuple[str, str], entry: MessageReceiptHandle) -> None:
        messages = self.groups.get(key)
        hkey = handle_key(entry.handle)
        if messages is not None and messages.get(hkey) is entry:
            del messages[hkey]
            if not messages:
                del self.groups[key]

    # -- renewing

    def scan(self) -> None:
        """DefaultReceiptHandleManager.scheduleRenewTask: forget the groups of clients gone, renew what is due."""
        due_before = self.now_ms() + self.config.renewAheadTimeMillis
        for key in list(self.groups):
            if not self.online(*key):
                log.info(
                    "client {client} of group {group} is gone: its messages come back", client=key[0], group=key[1]
                )
                self.clear_group(key)
                continue
            for entry in list(self.groups[key].values()):
                if self.in_flight >= MAX_RENEWS_IN_FLIGHT:
                    return
                if entry.waiters is None and entry.handle.next_visible_time <= due_before:
                    Deferred.fromCoroutine(self._renew(key, entry)).addErrback(
                        lambda f, id=entry.message_id: log.failure("renewing message {id} failed", f, id=id)
                    )

    async def _renew(self, key: tuple[str, str], entry: MessageReceiptHandle) -> None:
        """startRenewMessage: renew, or (past renewMaxTimeMillis) nack with the group's retry delay."""
        config = self.config
        entry.waiters = []
        self.in_flight += 1
        try:
            if entry.renew_retry_times >= config.maxRenewRetryTimes:
                log.warn("message {id} not renewed after {n} tries", id=entry.message_id, n=entry.renew_retry_times)
                self._drop(key, entry)
            elif self.now_ms() - entry.consume_timestamp < config.renewMaxTimeMillis:
                try:
                    entry.handle = await self.change(
                        entry.handle, entry.group, entry.topic, renew_delay(entry.renew_times)
                    )
                except (ProxyError, MQBrokerError) as e:  # the broker or the handle says no: Apache stops
                    log.warn("renewing message {id} failed: {error}", id=entry.message_id, error=e)
                    self._drop(key, entry)
                except Exception as e:  # e.g. a timeout: tried again at the next scan
                    log.warn("renewing message {id} failed, will retry: {error}", id=entry.message_id, error=e)
                    entry.renew_retry_times += 1
                else:
                    entry.renew_retry_times = 0
                    entry.renew_times += 1
            else:
                self._drop(key, entry)
                try:
                    await self.change(entry.handle, entry.group, entry.topic, retry_delay(entry.reconsume_times))
                except Exception as e:
                    log.warn("message {id} held too long; nack failed: {error}", id=entry.message_id, error=e)
        finally:
            self.in_flight -= 1
            waiters, entry.waiters = entry.waiters, None
            for d in waiters or ():
                d.callback(None)

    def clear_group(self, key: tuple[str, str]) -> Deferred[Any]:
        """The client is gone: what it held comes back after invisibleTimeMillisWhenClear."""
        messages = self.groups.pop(key, {})
        self._full.discard(key)
        ms = self.config.invisibleTimeMillisWhenClear

        def clear(_: None, entry: MessageReceiptHandle) -> Any:
            return Deferred.fromCoroutine(self._clear(entry, ms))

        return DeferredList([e.settled().addCallback(clear, e) for e in messages.values()], consumeErrors=True)

    async def _clear(self, entry: MessageReceiptHandle, ms: int) -> None:
        try:
            await self.change(entry.handle, entry.group, entry.topic, ms)
        except Exception as e:  # it comes back after its invisible time anyway
            log.info("releasing message {id} failed: {error}", id=entry.message_id, error=e)
