"""Drive the Apache C++ client (PyPI ``rocketmq==0.4.4``) from a child process, one scenario per sub-command.

The client is a ctypes-loaded C++ library with its own threads; running it in a child process isolates
crashes, lets the test bound the time, and gives it its own ``HOME`` (it writes logs under
``$HOME/logs/rocketmq-cpp``). Every sub-command prints JSON lines on stdout:

* ``produce``: ``{"event": "sent", "i": ..., "msg_id": ..., "offset": ...}`` per acknowledged message
  (none for oneway; a sync send's also has ``t``, when it was acknowledged), ``{"event": "send_error", ...}``
  per failed attempt, and a final
  ``{"event": "done", "sent": n, "failed": [i, ...]}``; exit 0 only if every message was acknowledged.
  With ``--count 0`` it sends one message after another (sync) until stdin is closed.
* ``consume`` (push consumer): ``{"event": "started"}``, one ``{"event": "msg", ...}`` per delivery,
  then ``{"event": "done", "received": n}``. It stops once ``--expect`` messages arrived and no further
  delivery came for ``--linger`` seconds, or when stdin is closed (``--expect 0``); exit 3 on timeout.
  With ``--fail-times k`` the callback raises (RECONSUME_LATER) for messages delivered fewer than k times
  before (reconsumeTimes < k), printing ``{"event": "failed", ...}`` instead. The library hands the callback
  a whole pull batch and gives the whole batch back at its first failure, so only the first message of a
  failed batch gets a ``failed`` line.
* ``pull`` (pull consumer from offset 0 of every queue): one ``msg`` line per message, then ``done``.

``expected(run, i)`` is the message number ``i`` of a run as the producer builds it; tests compare the
consumers' output with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

PROPERTY_NAMES = ("run", "idx", "user-prop")
EXIT_TIMEOUT = 3


def expected(run: str, i: int) -> dict[str, Any]:
    """Body, tags, keys and user properties of message ``i`` of ``run`` (printable, no NUL: c_char_p)."""
    return {
        "body": f"{run} message {i} \u00e9\u00e8 \u4e2d\u6587 {'x' * (i % 50)}",
        "tags": f"Tag{i % 3}",
        "keys": f"{run}-key-{i} alt-{i}",
        "props": {"run": run, "idx": str(i), "user-prop": f"value {i} = \u00fc"},
    }


def _emit(lock: threading.Lock, **fields: Any) -> None:
    line = json.dumps(fields, ensure_ascii=False)
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _decode(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _message(client: Any, topic: str, run: str, i: int, delay_level: int = 0) -> Any:
    spec = expected(run, i)
    msg = client.Message(topic)
    if delay_level:
        msg.set_delay_time_level(delay_level)
    msg.set_body(spec["body"].encode("utf-8"))
    msg.set_tags(spec["tags"])
    msg.set_keys(spec["keys"])
    for name, value in spec["props"].items():
        msg.set_property(name, value)
    return msg


def _received(msg: Any) -> dict[str, Any]:
    return {
        "topic": msg.topic,
        "body": _decode(msg.body),
        "tags": _decode(msg.tags),
        "keys": _decode(msg.keys),
        "props": {name: _decode(msg.get_property(name)) for name in PROPERTY_NAMES},
        "msg_id": msg.id,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "store_size": msg.store_size,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
    }


def _credentials(client_object: Any, args: argparse.Namespace) -> None:
    """ACL: the client signs its requests (AccessKey, Signature, OnsChannel ext fields)."""
    if args.access_key:
        client_object.set_session_credentials(args.access_key, args.secret_key, args.ons_channel)


def produce(args: argparse.Namespace) -> int:
    from rocketmq import client

    lock = threading.Lock()
    producer = client.Producer(args.group, timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    _credentials(producer, args)
    producer.start()
    indexes = list(range(args.start, args.start + args.count))
    sent: set[int] = set()
    failed: list[int] = []

    def attempt(send: Any, batch: list[int]) -> bool:
        # The client races itself on route info now and then ("No route info of this topic",
        # seen with Apache too): retry a failed send a few times, as an application would.
        for n in range(args.retries + 1):
            try:
                send(batch)
                return True
            except Exception as exc:
                _emit(lock, event="send_error", i=batch[0], n=len(batch), attempt=n, error=str(exc)[:300])
                time.sleep(0.2)
        return False

    def sync_one(batch: list[int]) -> None:
        result = producer.send_sync(_message(client, args.topic, args.run, batch[0], args.delay_level))
        if result.status != client.SendStatus.OK:
            raise RuntimeError(f"status {result.status!r}")
        sent.add(batch[0])
        _emit(lock, event="sent", i=batch[0], msg_id=result.msg_id, offset=result.offset, t=time.time())

    def orderly_one(batch: list[int]) -> None:
        # send_orderly's default selector: message i goes to queue (i % order_keys) % queues, one queue per key.
        result = producer.send_orderly(_message(client, args.topic, args.run, batch[0]), batch[0] % args.order_keys)
        if result.status != client.SendStatus.OK:
            raise RuntimeError(f"status {result.status!r}")
        sent.add(batch[0])
        _emit(lock, event="sent", i=batch[0], msg_id=result.msg_id, offset=result.offset)

    def oneway_one(batch: list[int]) -> None:
        producer.send_oneway(_message(client, args.topic, args.run, batch[0]))
        sent.add(batch[0])

    def batch_send(batch: list[int]) -> None:
        result = producer.send_batch([_message(client, args.topic, args.run, i) for i in batch])
        if result.status != client.SendStatus.OK:
            raise RuntimeError(f"status {result.status!r}")
        sent.update(batch)
        _emit(lock, event="batch", first=batch[0], n=len(batch), msg_id=result.msg_id, offset=result.offset)
        for i in batch:
            _emit(lock, event="sent", i=i, msg_id=result.msg_id, offset=result.offset)

    if args.mode == "async":
        pending: dict[int, int] = {}  # index -> attempts left
        done = threading.Event()

        def launch(i: int) -> None:
            def ok(result: Any) -> None:
                with lock:
                    sent.add(i)
                    pending.pop(i, None)
                _emit(lock, event="sent", i=i, msg_id=result.msg_id, offset=result.offset)
                if not pending:
                    done.set()

            def error(exc: Exception) -> None:
                _emit(lock, event="send_error", i=i, n=1, attempt=0, error=str(exc)[:300])
                with lock:
                    pending[i] -= 1
                    retry = pending[i] >= 0
                    if not retry:
                        pending.pop(i)
                        failed.append(i)
                if retry:
                    threading.Timer(0.2, launch, (i,)).start()
                elif not pending:
                    done.set()

            producer.send_async(_message(client, args.topic, args.run, i), ok, error)

        with lock:
            pending.update({i: args.retries for i in indexes})
        for i in indexes:
            launch(i)
        if not done.wait(args.timeout):
            _emit(lock, event="timeout", pending=sorted(pending))
            sys.stdout.flush()
            os._exit(EXIT_TIMEOUT)
    elif args.count == 0:  # sync sends until stdin is closed (a fault test's load)
        stdin_closed = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
        i = args.start
        while not stdin_closed.is_set():
            if not attempt(sync_one, [i]):
                failed.append(i)
            i += 1
    else:
        modes = {"sync": (sync_one, 1), "oneway": (oneway_one, 1), "batch": (batch_send, args.batch_size)}
        send, size = {**modes, "orderly": (orderly_one, 1)}[args.mode]
        for k in range(0, len(indexes), size):
            batch = indexes[k : k + size]
            if not attempt(send, batch):
                failed.extend(batch)
    producer.shutdown()
    _emit(lock, event="done", sent=len(sent), failed=sorted(failed))
    sys.stdout.flush()
    os._exit(0 if not failed and (args.count == 0 or len(sent) == args.count) else 1)


def consume(args: argparse.Namespace) -> int:
    from rocketmq import client

    lock = threading.Lock()
    state = {"received": 0, "last": time.monotonic()}
    model = client.MessageModel.BROADCASTING if args.broadcast else client.MessageModel.CLUSTERING
    consumer = client.PushConsumer(args.group, orderly=args.orderly, message_model=model)
    consumer.set_namesrv_addr(args.namesrv)
    _credentials(consumer, args)
    if args.instance:
        consumer.set_instance_name(args.instance)
    consumer.set_thread_count(args.threads)

    def on_message(msg: Any) -> None:
        record = _received(msg)
        if record["reconsume_times"] < args.fail_times:
            _emit(lock, event="failed", **record)
            raise RuntimeError("consume later")  # the wrapper answers RECONSUME_LATER
        # --hold-ms: stay in the callback a while; t0/t1 let a test see two members on one queue at once.
        record["t0"] = time.time()
        time.sleep(args.hold_ms / 1000)
        record["t1"] = time.time()
        with lock:
            state["received"] += 1
            state["last"] = time.monotonic()
        _emit(lock, event="msg", **record)

    consumer.subscribe(args.topic, on_message, args.expression)
    consumer.start()
    _emit(lock, event="started")
    stdin_closed = threading.Event()
    if args.expect == 0:
        threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
    deadline = time.monotonic() + args.timeout
    code = 0
    while True:
        time.sleep(0.05)
        with lock:
            received, last = state["received"], state["last"]
        if args.expect and received >= args.expect and time.monotonic() - last >= args.linger:
            break
        if stdin_closed.is_set():
            break
        if time.monotonic() > deadline:
            code = EXIT_TIMEOUT
            _emit(lock, event="timeout", received=received)
            break
    consumer.shutdown()  # persists the consumed offsets to the broker
    _emit(lock, event="done", received=state["received"])
    sys.stdout.flush()
    os._exit(code)


def pull(args: argparse.Namespace) -> int:
    from rocketmq import client

    lock = threading.Lock()
    consumer = client.PullConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    _credentials(consumer, args)
    consumer.start()
    n = 0
    for msg in consumer.pull(args.topic, args.expression):
        n += 1
        _emit(lock, event="msg", **_received(msg))
    consumer.shutdown()
    _emit(lock, event="done", received=n)
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("produce", "consume", "pull"):
        p = sub.add_parser(name)
        p.add_argument("--namesrv", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--timeout", type=float, default=60.0)
        p.add_argument("--expression", default="*")
        p.add_argument("--access-key", default="", help="ACL: sign requests with this access key")
        p.add_argument("--secret-key", default="")
        p.add_argument("--ons-channel", default="ALIYUN")
    p = sub.choices["produce"]
    p.add_argument("--run", required=True)
    p.add_argument("--count", type=int, required=True, help="0: sync sends until stdin is closed")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--mode", choices=("sync", "async", "oneway", "batch", "orderly"), default="sync")
    p.add_argument("--order-keys", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--send-timeout-ms", type=int, default=5000)
    p.add_argument("--delay-level", type=int, default=0)
    p = sub.choices["consume"]
    p.add_argument("--expect", type=int, default=0, help="0: run until stdin is closed")
    p.add_argument("--linger", type=float, default=2.0)
    p.add_argument("--instance", default="")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--fail-times", type=int, default=0)
    p.add_argument("--orderly", action="store_true", help="MessageListenerOrderly (queue locks)")
    p.add_argument("--broadcast", action="store_true", help="BROADCASTING message model")
    p.add_argument("--hold-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    return {"produce": produce, "consume": consume, "pull": pull}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
