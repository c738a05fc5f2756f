"""Send messages with a Producer: {"endpoint", "topic", "messages": [spec], "async": bool, "tls": bool, "ak", "sk",
"recall": [index of a sent message to recall]}.

Answers {"ids": [message id per message], "recalled": [the ids recall answered]} or {"error": "..."} when sending
or recalling fails.
"""

from _common import answer, args, configuration, message
from rocketmq import Producer

a = args()
producer = Producer(configuration(a), (a["topic"],), tls_enable=a.get("tls", False))
try:
    producer.startup()
    receipts = []
    for spec in a["messages"]:
        msg = message(a["topic"], spec)
        receipts.append(producer.send_async(msg).result(timeout=10) if a.get("async") else producer.send(msg))
    recalled = [producer.recall_message(a["topic"], receipts[i].recall_handle) for i in a.get("recall", ())]
    answer({"ids": [r.message_id for r in receipts], "recalled": recalled})
except Exception as e:  # the test reads the refusal
    answer({"error": f"{type(e).__name__}: {e}"})
finally:
    producer.shutdown()
