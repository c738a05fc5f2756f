"""What every scenario shares: its JSON argument, the client configuration, one JSON answer line."""

import json
import sys

from rocketmq import ClientConfiguration, Credentials, Message


def args() -> dict:
    return json.loads(sys.argv[1])


def configuration(a: dict) -> ClientConfiguration:
    return ClientConfiguration(a["endpoint"], Credentials(a.get("ak", ""), a.get("sk", "")), request_timeout=5)


def message(topic: str, spec: dict) -> Message:
    m = Message()
    m.topic = topic
    m.body = spec["body"].encode()
    if spec.get("tag"):
        m.tag = spec["tag"]
    for key in spec.get("keys", []):
        m.keys = key
    for k, v in spec.get("properties", {}).items():
        m.add_property(k, v)
    if spec.get("message_group"):
        m.message_group = spec["message_group"]
    if spec.get("delivery_s"):
        m.delivery_timestamp = spec["delivery_s"]  # the SDK takes epoch seconds
    return m


def answer(result: dict) -> None:
    print(json.dumps(result), flush=True)
