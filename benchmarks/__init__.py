"""Benchmarks: throughput and latency of a RocketMQ NameServer + Broker (ours or Apache's) over the wire."""
