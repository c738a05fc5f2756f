"""Transactional sends: {"endpoint", "topic", "action": "commit"|"rollback"|"orphan", "check": "COMMIT"|"ROLLBACK",
"wait": seconds}.

"orphan" ends neither way and waits for the server's check-back, which the TransactionChecker answers with
``check``. Answers {"id", "checked": [message ids the checker was asked about]}.
"""

import threading
import time

from _common import answer, args, configuration, message
from rocketmq import Producer, TransactionChecker, TransactionResolution

a = args()
checked = []
asked = threading.Event()


class Checker(TransactionChecker):
    def check(self, msg):
        checked.append(msg.message_id)
        asked.set()
        return TransactionResolution.COMMIT if a.get("check") == "COMMIT" else TransactionResolution.ROLLBACK


producer = Producer(configuration(a), (a["topic"],), checker=Checker())
try:
    producer.startup()
    transaction = producer.begin_transaction()
    receipt = producer.send(message(a["topic"], {"body": a.get("body", "tx")}), transaction)
    if a["action"] == "commit":
        transaction.commit()
    elif a["action"] == "rollback":
        transaction.rollback()
    else:
        asked.wait(a.get("wait", 30))
        time.sleep(1)  # the checker's answer (an EndTransaction) goes out after check() returns
    answer({"id": receipt.message_id, "checked": checked})
finally:
    producer.shutdown()
