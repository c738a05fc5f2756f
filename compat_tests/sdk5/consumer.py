"""Consume with a SimpleConsumer or a PushConsumer: {"endpoint", "topic", "group", "kind": "simple"|"push",
"expression", "sql": bool, "send": [spec], "want": n, "retry_first": bool, "fail": {body: n}, "slow": {body: seconds},
"wait": seconds, "from_committed": bool}.

The consumer starts first (a new group pops from the queues' ends, unless ``from_committed``: from the offsets
committed for it), then a Producer sends ``send``. Each message is acknowledged, except that with ``retry_first`` a
first delivery is not, nor the first ``fail[body]`` deliveries of a body: a simple consumer changes its invisible
duration to 1 s, a push consumer's listener answers FAILURE; it must come back (as attempt 2, or retried in place by
a FIFO push consumer). A push listener takes ``slow[body]`` seconds over a body (what arrives meanwhile comes in one
batch). Answers {"received": [{"body", "tag", "keys", "props", "group", "attempt", "id", "at"} per delivery ("at":
seconds since start)]} once ``want`` messages were acknowledged, or after ``wait`` seconds.
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
refusals = dict(a.get("fail", {}))
start = time.monotonic()


def record(msg) -> bool:
    """Note a delivery; whether to acknowledge it."""
    received.append(
        {
            "body": msg.body.decode(),
            "tag": msg.tag,
            "keys": sorted(msg.keys),
            "props": msg.properties,
            "group": msg.message_group,
            "attempt": msg.delivery_attempt,
            "id": msg.message_id,
            "at": time.monotonic() - start,
        }
    )
    if a.get("retry_first") and msg.delivery_attempt == 1:
        return False
    body = msg.body.decode()
    if refusals.get(body, 0) > 0:
        refusals[body] -= 1
        return False
    return True


def acknowledged() -> None:
    acked.append(1)
    if len(acked) >= a["want"]:
        done.set()


class Listener(MessageListener):
    def consume(self, msg):
        time.sleep(a.get("slow", {}).get(msg.body.decode(), 0))
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
    if not a.get("from_committed"):  # else the group's offsets were set beforehand
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
