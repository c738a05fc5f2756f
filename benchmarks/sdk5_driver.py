"""The gRPC side of ``benchmarks/sdk5.py``: runs in the RocketMQ 5 SDK's own venv (it imports that SDK's
``rocketmq``, never ours) and prints one JSON line; ``timed_sends`` serves the remoting side too.

Argument (JSON): {"endpoint", "topic", "group", "messages", "size", "threads", "batch"}. Sends ``messages``
bodies of ``size`` bytes from ``threads`` threads with the SDK's synchronous ``send``, then receives and acks
them with a SimpleConsumer (``batch`` per receive). The consumer is started before the sends so that its new
group begins at the queues' ends and receives exactly these messages.
"""

import json
import sys
import threading
import time
from collections.abc import Callable


def cpu() -> float:
    """This process's CPU seconds (ns resolution: times()'s 10 ms ticks can be a short drain's whole cost)."""
    return time.process_time()


def timed_sends(send: Callable[[], object], threads: int, per_thread: int) -> dict:
    """``send()`` ``per_thread`` times from each of ``threads`` threads, then the phase line the benchmark reads
    the server's CPU at: {"sent", "send_s", "send_latencies" (sorted), "send_client_cpu"}."""
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def run(out: list[float]) -> None:
        for _ in range(per_thread):
            start = time.perf_counter()
            send()
            out.append(time.perf_counter() - start)

    workers = [threading.Thread(target=run, args=(latencies[i],)) for i in range(threads)]
    cpu0, start = cpu(), time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    figures = {
        "sent": threads * per_thread,
        "send_s": time.perf_counter() - start,
        "send_latencies": sorted(x for part in latencies for x in part),
        "send_client_cpu": cpu() - cpu0,
    }
    print(json.dumps({"phase": "sent"}), flush=True)
    return figures


def main() -> None:
    # Imported here: benchmarks/sdk5.py imports this module beside the 4.x C++ binding's ``rocketmq``.
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

    a = json.loads(sys.argv[1])
    config = ClientConfiguration(a["endpoint"], Credentials("", ""), request_timeout=10)
    consumer = SimpleConsumer(config, a["group"], {a["topic"]: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    consumer.receive(a["batch"], 30)  # registers the group at the queues' ends
    producer = Producer(config, (a["topic"],))
    producer.startup()
    body = b"x" * a["size"]

    def send() -> None:
        message = Message()
        message.topic, message.body = a["topic"], body
        producer.send(message)

    figures = timed_sends(send, a["threads"], a["messages"] // a["threads"])
    producer.shutdown()

    wanted, received, receive_latencies = figures["sent"], 0, []
    cpu0, start = cpu(), time.perf_counter()
    deadline = start + 120
    while received < wanted and time.perf_counter() < deadline:
        call = time.perf_counter()
        messages = consumer.receive(a["batch"], 30)
        receive_latencies.append(time.perf_counter() - call)
        for msg in messages:
            consumer.ack(msg)
        received += len(messages)
    figures.update(
        received=received,
        receive_s=time.perf_counter() - start,
        receive_latencies=sorted(receive_latencies),
        receive_client_cpu=cpu() - cpu0,
    )
    consumer.shutdown()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
