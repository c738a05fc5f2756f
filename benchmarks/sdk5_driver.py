"""The gRPC side of ``benchmarks/sdk5.py``: runs in the RocketMQ 5 SDK's own venv (it imports that SDK's
``rocketmq``, never ours) and prints one JSON line.

Argument (JSON): {"endpoint", "topic", "group", "messages", "size", "threads", "batch"}. Sends ``messages``
bodies of ``size`` bytes from ``threads`` threads with the SDK's synchronous ``send``, then receives and acks
them with a SimpleConsumer (``batch`` per receive). The consumer is started before the sends so that its new
group begins at the queues' ends and receives exactly these messages.
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def _cpu() -> float:
    return time.process_time()  # ns resolution: the times() ticks are 10 ms, a short drain's whole cost


def _send(producer: Producer, topic: str, body: bytes, count: int, latencies: list[float]) -> None:
    for _ in range(count):
        msg = Message()
        msg.topic = topic
        msg.body = body
        start = time.perf_counter()
        producer.send(msg)
        latencies.append(time.perf_counter() - start)


def main() -> None:
    a = json.loads(sys.argv[1])
    config = ClientConfiguration(a["endpoint"], Credentials("", ""), request_timeout=10)
    consumer = SimpleConsumer(config, a["group"], {a["topic"]: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    consumer.receive(a["batch"], 30)  # registers the group at the queues' ends
    producer = Producer(config, (a["topic"],))
    producer.startup()
    body = b"x" * a["size"]
    per_thread = a["messages"] // a["threads"]
    latencies: list[list[float]] = [[] for _ in range(a["threads"])]
    threads = [
        threading.Thread(target=_send, args=(producer, a["topic"], body, per_thread, latencies[i]))
        for i in range(a["threads"])
    ]
    cpu, start = _cpu(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    send_s, send_cpu = time.perf_counter() - start, _cpu() - cpu
    print(json.dumps({"phase": "sent"}), flush=True)  # the benchmark reads the server's CPU here
    producer.shutdown()

    wanted, received, receive_latencies = per_thread * a["threads"], 0, []
    cpu, start = _cpu(), time.perf_counter()
    deadline = start + 120
    while received < wanted and time.perf_counter() < deadline:
        call = time.perf_counter()
        messages = consumer.receive(a["batch"], 30)
        receive_latencies.append(time.perf_counter() - call)
        for msg in messages:
            consumer.ack(msg)
        received += len(messages)
    receive_s, receive_cpu = time.perf_counter() - start, _cpu() - cpu
    consumer.shutdown()
    print(
        json.dumps(
            {
                "sent": wanted,
                "send_s": send_s,
                "send_latencies": sorted(x for part in latencies for x in part),
                "send_client_cpu": send_cpu,
                "received": received,
                "receive_s": receive_s,
                "receive_latencies": sorted(receive_latencies),
                "receive_client_cpu": receive_cpu,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
