"""RocketMQ 4.x master/slave replication (the HA stream on the master's haListenPort)."""
