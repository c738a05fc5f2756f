"""The client for plain threaded code: the same producers and consumers, with methods that block.

Every call is handed to a reactor running in a background thread (``blockingCallFromThread``). By default
that is a private reactor of this module, started on first use in a daemon thread: Twisted's global
reactor is left alone because the program (or pytest-twisted) may want to run it itself later, and a
reactor cannot be restarted. Pass ``reactor_thread=ReactorThread(reactor)`` to use a reactor you already
run in another thread.

Push consumer listeners run in a pool of worker threads (``consume_thread_max``, like Java's
ConsumeMessageThread pool), so they may block and may call the blocking API. Async-send callbacks run
in the reactor's thread pool. Never call these methods from the reactor thread itself.

    with blocking.Producer("pg", "127.0.0.1:9876") as producer:
        result = producer.send(build_message("TopicTest", b"hello", tags="TagA"))
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

try:
    from twisted.internet.epollreactor import EPollReactor as _PrivateReactor
except ImportError:  # not Linux
    from twisted.internet.selectreactor import SelectReactor as _PrivateReactor
from twisted.internet.threads import blockingCallFromThread, deferToThreadPool
from twisted.python.threadpool import ThreadPool

from gateway.remoting.bodies import MessageQueue, TopicRouteData
from gateway.remoting.message import Message, MessageExt
from gateway.trace.view import TraceView

from . import admin, consumer, producer, push_consumer, transaction_producer
from .consume_orderly import ConsumeOrderlyStatus
from .message_selector import MessageSelector
from .push_consumer import ConsumeStatus


class ReactorThread:
    """A reactor in a daemon thread (started here unless already running) and blocking calls into it."""

    _default: ClassVar[ReactorThread | None] = None
    _default_lock = threading.Lock()

    def __init__(self, reactor: Any = None) -> None:
        self.reactor = reactor if reactor is not None else _PrivateReactor()
        self.thread: threading.Thread | None = None
        if not self.reactor.running:
            running = threading.Event()
            self.reactor.callWhenRunning(running.set)
            self.thread = threading.Thread(
                target=self.reactor.run,
                kwargs={"installSignalHandlers": False},
                name="rocketmq-client-reactor",
                daemon=True,
            )
            self.thread.start()
            running.wait()

    @classmethod
    def default(cls) -> ReactorThread:
        """The module's private reactor thread, started on first use."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls()
            return cls._default

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` in the reactor thread; wait for its result (or its Deferred's)."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking client call from the reactor thread would deadlock")
        # partial: blockingCallFromThread's own parameter names must not clash with ours (reactor=...).
        return blockingCallFromThread(self.reactor, functools.partial(fn, *args, **kwargs))


class _Blocking:
    """Holds the Twisted-side object as ``core``; ``shutdown()`` on leaving a ``with`` block."""

    core: Any

    def __init__(self, reactor_thread: ReactorThread | None) -> None:
        self.reactor_thread = reactor_thread or ReactorThread.default()

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.reactor_thread.call(fn, *args, **kwargs)

    def _make(self, cls: type, *args: Any, **options: Any) -> Any:
        return self._call(cls, *args, reactor=self.reactor_thread.reactor, **options)

    def shutdown(self) -> None:
        self._call(self.core.shutdown)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class _Started(_Blocking):
    """Started on entering a ``with`` block."""

    def start(self) -> None:
        self._call(self.core.start)

    def __enter__(self) -> Any:
        self.start()
        return self


class _MQAdmin(_Blocking):
    """Blocking :class:`~gateway.client.admin.MQAdmin` queries."""

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._call(self.core.fetch_subscribe_message_queues, topic)

    def max_offset(self, mq: MessageQueue) -> int:
        return self._call(self.core.max_offset, mq)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._call(self.core.min_offset, mq)

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        return self._call(self.core.search_offset, mq, timestamp)

    def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return self._call(self.core.earliest_msg_store_time, mq)


class Admin(_MQAdmin):
    """Blocking :class:`~gateway.client.admin.Admin`."""

    def __init__(
        self, namesrv_addr: str | Sequence[str], *, reactor_thread: ReactorThread | None = None, **options: Any
    ) -> None:
        super().__init__(reactor_thread)
        self.core = self._make(admin.Admin, namesrv_addr, **options)

    def get_route(self, topic: str) -> TopicRouteData:
        return self._call(self.core.get_route, topic)

    def create_topic(self, topic: str, queue_nums: int = 4, **options: Any) -> None:
        self._call(self.core.create_topic, topic, queue_nums, **options)

    def query_msg_trace_by_id(self, msg_id: str, **options: Any) -> list[TraceView]:
        return self._call(self.core.query_msg_trace_by_id, msg_id, **options)


class Producer(_Started):
    """Blocking :class:`~gateway.client.producer.Producer`; ``options`` are its keyword arguments."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str],
        *,
        reactor_thread: ReactorThread | None = None,
        **options: Any,
    ) -> None:
        super().__init__(reactor_thread)
        self.core = self._make(producer.Producer, group, namesrv_addr, **options)

    def send(self, msg: Message, **kwargs: Any) -> producer.SendResult:
        """Send and wait; ``queue=``, ``selector=``/``arg=`` and ``timeout=`` as in the Twisted API."""
        return self._call(self.core.send, msg, **kwargs)

    def send_async(
        self,
        msg: Message,
        on_success: Callable[[producer.SendResult], Any],
        on_exception: Callable[[BaseException], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Send in the background; the callbacks run in a worker thread."""
        in_thread = self.reactor_thread.reactor.callInThread
        self._call(
            self.core.send_async,
            msg,
            lambda result: in_thread(on_success, result),
            (lambda error: in_thread(on_exception, error)) if on_exception else None,
            **kwargs,
        )

    def send_oneway(self, msg: Message, **kwargs: Any) -> None:
        self._call(self.core.send_oneway, msg, **kwargs)

    def send_batch(self, msgs: Sequence[Message], **kwargs: Any) -> producer.SendResult:
        return self._call(self.core.send_batch, msgs, **kwargs)

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._call(self.core.fetch_publish_message_queues, topic)


class _ListenerInThreads:
    """A transaction listener whose methods run in the reactor's thread pool, so they may block."""

    def __init__(self, listener: transaction_producer.TransactionListener, reactor: Any) -> None:
        self.listener = listener
        self.reactor = reactor

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        return deferToThreadPool(
            self.reactor, self.reactor.getThreadPool(), self.listener.execute_local_transaction, msg, arg
        )

    def check_local_transaction(self, msg: MessageExt) -> Any:
        return deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self.listener.check_local_transaction, msg)


class TransactionProducer(Producer):
    """Blocking :class:`~gateway.client.transaction_producer.TransactionProducer`; the listener's methods run
    in worker threads."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str],
        *,
        transaction_listener: transaction_producer.TransactionListener,
        reactor_thread: ReactorThread | None = None,
        **options: Any,
    ) -> None:
        _Started.__init__(self, reactor_thread)
        listener = _ListenerInThreads(transaction_listener, self.reactor_thread.reactor)
        self.core = self._make(
            transaction_producer.TransactionProducer, group, namesrv_addr, transaction_listener=listener, **options
        )

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> transaction_producer.TransactionSendResult:
        return self._call(self.core.send_message_in_transaction, msg, arg)

    def send_heartbeat(self) -> None:
        """Heartbeat every broker known now: a broker checks half messages back only with producers it has heard
        of, so one that sends halves without ``send_message_in_transaction`` calls this once they are stored."""
        self._call(self.core.client.send_heartbeat_to_all_brokers)


class _Consumer(_Started, _MQAdmin):
    """What the blocking pull and push consumers share."""

    def persist_consumer_offset(self) -> None:
        """Send the consumed offsets to the brokers now (the client instance sends them every
        ``persist_consumer_offset_interval`` otherwise)."""
        self._call(self.core.persist_consumer_offset)


class PullConsumer(_Consumer):
    """Blocking :class:`~gateway.client.consumer.PullConsumer`."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str],
        *,
        reactor_thread: ReactorThread | None = None,
        **options: Any,
    ) -> None:
        super().__init__(reactor_thread)
        self.core = self._make(consumer.PullConsumer, group, namesrv_addr, **options)

    def pull(
        self, mq: MessageQueue, expression: str | MessageSelector, offset: int, max_nums: int, *, block: bool = False
    ) -> consumer.PullResult:
        return self._call(self.core.pull, mq, expression, offset, max_nums, block=block)

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        return self._call(self.core.fetch_consume_offset, mq, from_store)

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        self._call(self.core.update_consume_offset, mq, offset)


class PushConsumer(_Consumer):
    """Blocking :class:`~gateway.client.push_consumer.PushConsumer`; the listener runs in worker threads."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str],
        *,
        reactor_thread: ReactorThread | None = None,
        consume_thread_max: int = 20,
        **options: Any,
    ) -> None:
        super().__init__(reactor_thread)
        self.core = self._make(
            push_consumer.PushConsumer, group, namesrv_addr, consume_concurrency=consume_thread_max, **options
        )
        self._pool = ThreadPool(1, consume_thread_max, name=f"ConsumeMessageThread_{group}")

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        self._call(self.core.subscribe, topic, expression)

    def _in_pool(self, listener: Callable[[list[MessageExt]], Any]) -> Callable[[list[MessageExt]], Any]:
        reactor, pool = self.reactor_thread.reactor, self._pool
        return lambda msgs: deferToThreadPool(reactor, pool, listener, msgs)

    def register_message_listener(self, listener: Callable[[list[MessageExt]], ConsumeStatus]) -> None:
        """``listener(msgs)`` runs in a worker thread and returns a ConsumeStatus."""
        self._call(self.core.register_message_listener, self._in_pool(listener))

    def register_message_listener_orderly(
        self, listener: Callable[[list[MessageExt]], ConsumeOrderlyStatus], **timings: float
    ) -> None:
        """``listener(msgs)`` runs in a worker thread, one call per queue at a time, and returns a
        ConsumeOrderlyStatus."""
        self._call(self.core.register_message_listener_orderly, self._in_pool(listener), **timings)

    def start(self) -> None:
        self._pool.start()
        try:
            super().start()
        except BaseException:
            self._pool.stop()  # its threads would keep the interpreter from exiting
            raise

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            self._pool.stop()

    def assigned_queues(self) -> set[MessageQueue]:
        return self._call(self.core.assigned_queues)
