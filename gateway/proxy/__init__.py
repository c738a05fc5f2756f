"""The RocketMQ 5 gRPC endpoint (``apache.rocketmq.v2.MessagingService``), as Apache's proxy in cluster mode."""
