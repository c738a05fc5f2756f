"""The web console in a real headless Chromium, against a broker with traffic: each page loads and shows what
the broker holds. Screenshots are kept in ``artifacts/console/`` (or ``$CONSOLE_SCREENSHOTS``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import UpdateConsumerOffsetRequestHeader
from gateway.trace.codec import TraceBean, TraceContext, TraceType, encode_context
from tests.acl.conftest import PLAIN_ACL_YML

from .conftest import BrokerUnderTest, remoting  # noqa: F401
from .test_broker_server import create_topic, heartbeat, pull_request, send

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", ROOT / "artifacts" / "console"))

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (scripts/test installs it)"
)


def chromium(url: str, screenshot: str) -> str:
    """The page's DOM after load, as headless Chromium renders it; a screenshot too."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
    subprocess.run(
        [*base, f"--screenshot={SHOTS / screenshot}", "--window-size=1280,900", url],
        check=True,
        capture_output=True,
        timeout=60,
    )
    result = subprocess.run([*base, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=60)
    return result.stdout


@pytest_twisted.async_yield_fixture
async def console_broker(tmp_path: Path, remoting) -> AsyncIterator[BrokerUnderTest]:  # noqa: F811
    broker = BrokerUnderTest(tmp_path, remoting, metricsExporterType="PROM", metricsPromExporterPort="0")
    broker.start()
    yield broker
    await broker.stop()


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_console_pages_in_chromium(console_broker: BrokerUnderTest) -> None:
    broker = console_broker
    controller = broker.controller
    base = f"http://127.0.0.1:{controller.config.metricsPromExporterPort}"
    await create_topic(broker, "ConsoleTopic", 2)
    sent = []
    for i in range(12):
        resp = await send(broker, "ConsoleTopic", b"<b>body %d</b>" % i, {"KEYS": f"key{i}", "TAGS": "T"}, i % 2)
        assert resp.code == ResponseCode.SUCCESS
        sent.append(resp.ext_fields["msgId"])
    assert (await broker.call(heartbeat("console-client", "console_cg", "ConsoleTopic"))).code == 0
    assert (await broker.call(pull_request("ConsoleTopic", 0, 0, sub="*", group="console_cg"))).code == 0
    header = UpdateConsumerOffsetRequestHeader("console_cg", "ConsoleTopic", 0, 2).encode()
    assert (await broker.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))).code == 0
    # A Pub trace record of the first message, as a producer with tracing on writes it.
    bean = TraceBean(topic="ConsoleTopic", msg_id="UNIQ0001", keys="key0", store_host=broker.addr, body_length=13)
    ctx = TraceContext(TraceType.Pub, 1_700_000_000_000, "console_pg", cost_time=3, beans=[bean])
    trace_body, keys = encode_context(ctx)
    resp = await send(broker, "RMQ_SYS_TRACE_TOPIC", trace_body.encode(), {"KEYS": " ".join(sorted(keys))})
    assert resp.code == ResponseCode.SUCCESS
    controller.stats.sample()  # two samples make a chart
    for _ in range(5):
        await send(broker, "ConsoleTopic", b"more", {})
    controller.stats.sample()

    dom = await deferToThread(chromium, f"{base}/", "cluster.png")
    assert "<h1>Cluster</h1>" in dom and "broker-a" in dom and "messages put since start" in dom

    dom = await deferToThread(chromium, f"{base}/console/topics", "topics.png")
    assert "ConsoleTopic" in dom and "RMQ_SYS_TRACE_TOPIC" in dom
    dom = await deferToThread(chromium, f"{base}/console/topics?topic=ConsoleTopic", "topic.png")
    assert "Topic ConsoleTopic" in dom and "console_cg" in dom
    # Queue 0: 6 of the first 12 and the 5 later ones.
    assert '<td class="n">0</td><td class="n">0</td><td class="n">11</td><td class="n">11</td>' in dom

    dom = await deferToThread(chromium, f"{base}/console/groups", "groups.png")
    assert "console_cg" in dom
    dom = await deferToThread(chromium, f"{base}/console/groups?group=console_cg", "group.png")
    assert 'Total lag: <span class="lag">9</span>' in dom and "console-client" in dom

    dom = await deferToThread(chromium, f"{base}/console/message?id={sent[3]}", "message.png")
    assert "1 found" in dom and "key3" in dom
    assert "&lt;b&gt;body 3&lt;/b&gt;" in dom and "<b>body 3</b>" not in dom  # bodies are shown, not run
    dom = await deferToThread(chromium, f"{base}/console/message?topic=ConsoleTopic&key=key5", "by_key.png")
    assert "1 found" in dom and "body 5" in dom

    dom = await deferToThread(chromium, f"{base}/console/trace?id=UNIQ0001", "trace.png")
    assert "console_pg" in dom and "Pub" in dom

    dom = await deferToThread(chromium, f"{base}/console/throughput", "throughput.png")
    assert "<polyline" in dom and "put TPS" in dom

    bad = f"{base}/console/topics?topic={quote('../etc')}"
    status = await deferToThread(_status, bad)
    assert status == 400
    assert await deferToThread(_status, f"{base}/console/nope") == 404
    for name in ("cluster", "topics", "topic", "groups", "group", "message", "by_key", "trace", "throughput"):
        assert (SHOTS / f"{name}.png").stat().st_size > 1000


def _get(url: str) -> tuple[int, str]:
    """Status and page over plain HTTP."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _status(url: str) -> int:
    return _get(url)[0]


async def _commit_offset(broker: BrokerUnderTest, group: str, topic: str, offset: int) -> None:
    header = UpdateConsumerOffsetRequestHeader(group, topic, 0, offset).encode()
    assert (await broker.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))).code == 0


@pytest_twisted.ensureDeferred
async def test_console_shows_rocketmq_words_and_colours_only_lag(console_broker: BrokerUnderTest) -> None:
    broker = console_broker
    base = f"http://127.0.0.1:{broker.controller.config.metricsPromExporterPort}/console"
    await create_topic(broker, "WordsTopic", 1)
    for i in range(3):
        assert (await send(broker, "WordsTopic", b"m%d" % i, {})).code == ResponseCode.SUCCESS
    await _commit_offset(broker, "caught_up_cg", "WordsTopic", 3)
    await _commit_offset(broker, "behind_cg", "WordsTopic", 1)

    status, page = await deferToThread(_get, f"{base}/topics")
    assert status == 200
    # perm and order as TopicConfig prints them (perm2String, Java's booleans), not Python's 6 and False.
    assert '>WordsTopic</a></td><td class="n">1</td><td class="n">1</td><td>RW-</td><td>false</td>' in page
    assert "<td>False</td>" not in page and "<td>True</td>" not in page

    status, page = await deferToThread(_get, f"{base}/groups?group=caught_up_cg")
    assert status == 200 and "<p>Total lag: 0</p>" in page and "class='lag'" not in page
    status, page = await deferToThread(_get, f"{base}/groups?group=behind_cg")
    assert status == 200 and "<p>Total lag: <span class='lag'>2</span></p>" in page

    status, page = await deferToThread(_get, f"{base}/message?id=garbage")
    assert status == 400 and "<p>not an offset message id: garbage</p>" in page and "fromhex" not in page
    assert 'value="garbage"' in page  # in the form, to be corrected


@pytest_twisted.ensureDeferred
async def test_console_message_pages_refused_with_acl(tmp_path: Path, remoting) -> None:  # noqa: F811
    conf = tmp_path / "home" / "conf"
    conf.mkdir(parents=True)
    (conf / "plain_acl.yml").write_text(PLAIN_ACL_YML)
    broker = BrokerUnderTest(
        tmp_path,
        remoting,
        metricsExporterType="PROM",
        metricsPromExporterPort="0",
        aclEnable="true",
        rocketmqHome=str(tmp_path / "home"),
    )
    broker.start()
    try:
        base = f"http://127.0.0.1:{broker.controller.config.metricsPromExporterPort}"
        assert await deferToThread(_status, f"{base}/console/message?id=00") == 403
        assert await deferToThread(_status, f"{base}/console/trace?id=x") == 403
        assert await deferToThread(_status, f"{base}/console/topics") == 200
    finally:
        await broker.stop()
