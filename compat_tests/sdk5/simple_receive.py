"""One receive of a SimpleConsumer: {"endpoint", "topic", "group"}. Answers {"received": n} or {"error": "..."}
when startup or the receive fails (a broker without POP, a refused account)."""

from _common import answer, args, configuration
from rocketmq import FilterExpression, SimpleConsumer

a = args()
consumer = SimpleConsumer(configuration(a), a["group"], {a["topic"]: FilterExpression("*")}, await_duration=2)
try:
    consumer.startup()
    answer({"received": len(consumer.receive(16, 10))})
except Exception as e:  # the test reads the refusal
    answer({"error": f"{type(e).__name__}: {e}"})
finally:
    consumer.shutdown()
