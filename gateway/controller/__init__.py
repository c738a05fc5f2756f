"""RocketMQ 5's controller: elects each broker group's master from its SyncStateSet, replicated with Raft."""
