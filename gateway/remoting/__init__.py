"""RocketMQ remoting protocol: frames, headers, bodies and messages (sans-IO, no Twisted here)."""
