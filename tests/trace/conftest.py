"""The Java client's golden traces (tests/trace/golden) as the stored messages they were."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gateway.remoting.message import MessageConst, MessageExt
from gateway.remoting.names import TRACE_TOPIC

GOLDEN = Path(__file__).parent / "golden"


def golden_trace_messages() -> list[MessageExt]:
    """trace-1..4 with the msgId, born host, times and KEYS java-4.9.8-traces.txt gives for each."""
    text = (GOLDEN / "java-4.9.8-traces.txt").read_text()
    messages = []
    for block in text.split("=== ")[1:]:
        name = block.split()[0]
        head = re.search(r"msgId: (\w+)\s+bornHost: (\S+)\s+bornTimestamp: (\d+)\s+storeTimestamp: (\d+)", block)
        keys = re.search(r"^keys: (.*)$", block, re.M)
        assert head and keys, name
        body = (GOLDEN / name).read_bytes()
        props = {MessageConst.KEYS: keys.group(1), MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: head.group(1)}
        offset = int(re.search(r"queueOffset=(\d+)", block).group(1))  # type: ignore[union-attr]
        messages.append(
            MessageExt(
                TRACE_TOPIC,
                body,
                0,
                props,
                0,
                offset,
                0,
                0,
                int(head.group(3)),
                f"{head.group(2)}:0",
                int(head.group(4)),
                "127.0.0.1:0",
                0,
                0,
                0,
                len(body),
                "",
            )
        )
    return messages


def java5_trace_bodies() -> list[tuple[str, bytes]]:
    """(msgId, body) of the trace messages the Java 5.3.3 client wrote (java-5.3.3-traces.json)."""
    data = json.loads((GOLDEN / "java-5.3.3-traces.json").read_text())
    return [(m["msgId"], m["body"].encode()) for m in data]
