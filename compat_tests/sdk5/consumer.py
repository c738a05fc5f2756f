"""Consume with a SimpleConsumer or a PushConsumer: {"endpoint", "topic", "group", "kind": "simple"|"push",
"expression", "sql": bool, "send": [spec], "want": n, "retry_first": bool, "wait": seconds, "hold": seconds}.

The consumer starts first (a new group pops from the queues' ends), then a Producer sends ``send``. Each message is
acknowledged, except that with ``retry_first`` a first delivery is not: a simple consumer changes its invisible
duration to 1 s, a push consumer's listener answers FAILURE; it must come back as attempt 2. With ``hold`` a push
consumer's listener takes that long over a first delivery (past the invisible time: the proxy renews it). Answers
{"received": [{"body", "tag", "keys", "props", "attempt", "id"} per delivery]} once ``want`` messages were
acknowledged, or after ``wait`` seconds.
"""

import threading
import time

from _common import answer, args, configuration, message
from rocketmq import ConsumeResult, FilterExpression, MessageListener, Producer, PushConsumer, SimpleConsumer
from rocketmq.grpc_protocol import FilterType

a = args()
received = []
acked = []
done = threading.Event()


def record(msg) -> bool:
    """Note a delivery; whether to acknowledge it."""
    received.append(
        {
            "body": msg.body.decode(),
            "tag": msg.tag,
            "keys": sorted(msg.keys),
            "props": msg.properties,
            "attempt": msg.delivery_attempt,
            "id": msg.message_id,
        }
    )
    return not (a.get("retry_first") and msg.delivery_attempt == 1)


def acknowledged() -> None:
    acked.append(1)
    if len(acked) >= a["want"]:
        done.set()


class Listener(MessageListener):
    def consume(self, msg):
        if a.get("hold") and msg.delivery_attempt == 1:
            time.sleep(a["hold"])
        if record(msg):
            acknowledged()
            return ConsumeResult.SUCCESS
        return ConsumeResult.FAILURE


kind = FilterType.SQL if a.get("sql") else FilterType.TAG
subscription = {a["topic"]: FilterExpression(a.get("expression", "*"), kind)}
config = configuration(a)
if a["kind"] == "push":
    consumer = PushConsumer(config, a["group"], Listener(), subscription)
    consumer.startup()
    time.sleep(2)  # its assignment and first receive
else:
    consumer = SimpleConsumer(config, a["group"], subscription, await_duration=2)
    consumer.startup()
    consumer.receive(16, 10)  # places the group at the queues' ends
producer = Producer(config, (a["topic"],))
producer.startup()
for spec in a["send"]:
    producer.send(message(a["topic"], spec))
producer.shutdown()
deadline = time.monotonic() + a.get("wait", 30)
while not done.is_set() and time.monotonic() < deadline:
    if a["kind"] == "push":
        done.wait(0.2)
        continue
    for msg in consumer.receive(16, 10):
        if record(msg):
            consumer.ack(msg)
            acknowledged()
        else:
            consumer.change_invisible_duration(msg, 1)
consumer.shutdown()
answer({"received": received})
