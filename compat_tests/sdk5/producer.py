"""Send messages with a Producer: {"endpoint", "topic", "messages": [spec], "async": bool, "tls": bool, "ak", "sk"}.

Answers {"ids": [message id per message]} or {"error": "..."} when sending fails.
"""

from _common import answer, args, configuration, message
from rocketmq import Producer

a = args()
producer = Producer(configuration(a), (a["topic"],), tls_enable=a.get("tls", False))
try:
    producer.startup()
    ids = []
    for spec in a["messages"]:
        msg = message(a["topic"], spec)
        receipt = producer.send_async(msg).result(timeout=10) if a.get("async") else producer.send(msg)
        ids.append(receipt.message_id)
    answer({"ids": ids})
except Exception as e:  # the test reads the refusal
    answer({"error": f"{type(e).__name__}: {e}"})
finally:
    producer.shutdown()
