"""POP consumption (RocketMQ 5): checkpoints and acks kept as messages in the revive topic, the revive service
that puts unacknowledged messages into the pop retry topic, and the hold service for pops that found nothing.

The default path of Apache 5.3.3 (no PopBufferMergeService merge, no RocksDB PopConsumerService): a pop writes
one checkpoint per queue it read to ``rmq_sys_REVIVE_LOG_<cluster>``, delivered by the timer service one second
before the messages become visible again; an ack writes an ack record there, delivered at that same time. The
revive service reads the revive queues in order, pairs the acks with their checkpoints, and re-puts what is
left unacknowledged once its invisible time has passed.
"""
