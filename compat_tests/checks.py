"""The exactly-once check shared by the third-party client suites."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any


def check_exactly_once(
    messages: Iterable[dict[str, Any]],
    run_id: str,
    indexes: Iterable[int],
    topic: str,
    what: str,
    expected_of: Callable[[int], dict[str, Any]],
) -> None:
    """Every message of ``run_id`` numbered in ``indexes`` arrived exactly once, intact, and nothing else.

    Messages are dicts with body, tags, keys, props and topic as the client printed them; ``expected_of(i)``
    gives the first four for message ``i``.
    """
    wanted = set(indexes)
    seen: Counter[int] = Counter()
    foreign = []
    for msg in messages:
        props = msg.get("props") or {}
        if props.get("run") != run_id or not str(props.get("idx", "")).isdigit():
            foreign.append(msg)
            continue
        i = int(props["idx"])
        seen[i] += 1
        got = {"body": msg["body"], "tags": msg["tags"], "keys": msg["keys"], "props": msg["props"]}
        msg_id = msg.get("msgId", msg.get("msg_id"))
        assert got == expected_of(i), f"{what}: message {i} changed on the way (msg id {msg_id})"
        assert msg["topic"] == topic, f"{what}: message {i} came with topic {msg['topic']!r}"
    missing = sorted(wanted - set(seen))
    twice = sorted(i for i, n in seen.items() if n > 1)
    unexpected = sorted(set(seen) - wanted)
    assert not foreign, f"{what}: {len(foreign)} messages not of this run, e.g. {foreign[:3]}"
    assert not missing, f"{what}: {len(missing)} of {len(wanted)} messages never arrived, e.g. {missing[:20]}"
    assert not twice, f"{what}: {len(twice)} messages arrived more than once, e.g. {twice[:20]}"
    assert not unexpected, f"{what}: messages {unexpected[:20]} were not expected here"
