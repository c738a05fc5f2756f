"""A small read-only web console on the broker's HTTP port (the one of ``/metrics``): the cluster and its
brokers, topics with their queues, consumer groups with lag per queue, message lookup by id or key, a
message's trace, and put/get throughput over the last half hour.

Pages are rendered on the server (no script): every value is escaped, names from the query string are
checked as the remoting requests check them, and with ACL on the message and trace pages are refused, since
the console has no account to check them against.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from gateway.remoting import fastjson
from gateway.remoting.bodies import ConsumeType
from gateway.remoting.codes import PermName, RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import MessageExt, RecordError, decode_offset_message_id, decode_records
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX, TRACE_TOPIC, topic_problem
from gateway.trace.view import trace_views

from .inner import look_message

if TYPE_CHECKING:
    from twisted.web.server import Request

    from .controller import BrokerController

log = Logger()

_BODY_SHOWN = 4096
_STYLE = """
body{font-family:sans-serif;margin:0;color:#222}
nav{background:#1f3b57;padding:8px 16px}nav a{color:#fff;margin-right:18px;text-decoration:none}
main{padding:12px 16px}table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}th{background:#eef2f6}
td.n{text-align:right}.lag{color:#b00;font-weight:bold}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}
"""
_PAGES = (
    ("", "Cluster"),
    ("topics", "Topics"),
    ("groups", "Consumer groups"),
    ("message", "Messages"),
    ("trace", "Trace"),
    ("throughput", "Throughput"),
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _ms(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) if ts > 0 else "-"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], raw: Sequence[int] = ()) -> str:
    """A table; cells are escaped except the columns in ``raw`` (links built here)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = str(cell) if i in raw else _e(cell)
            css = ' class="n"' if isinstance(cell, (int, float)) and not isinstance(cell, bool) else ""
            cells.append(f"<td{css}>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _page(broker: BrokerController, title: str, content: str) -> bytes:
    cfg = broker.config
    nav = "".join(f'<a href="/console/{path}">{_e(name)}</a>' for path, name in _PAGES)
    if broker.config.clusterConsoleUrl:
        nav += f'<a href="{_e(broker.config.clusterConsoleUrl)}">Cluster console</a>'
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)} - {_e(cfg.brokerName)}</title>"
        f"<style>{_STYLE}</style></head><body><nav>{nav}</nav><main><h1>{_e(title)}</h1>"
        f"<p>Broker {_e(cfg.brokerName)} ({_e(cfg.broker_addr)}) of cluster {_e(cfg.brokerClusterName)}</p>"
        f"{content}</main></body></html>"
    ).encode()


def _arg(request: Request, name: str) -> str:
    return (request.args.get(name.encode()) or [b""])[0].decode("utf-8", "replace").strip()


class ConsoleResource(Resource):
    """``/console/<page>``: one method per page; async ones render when their data is in."""

    def __init__(self, broker: BrokerController) -> None:
        super().__init__()
        self.broker = broker

    def getChild(self, path: bytes, request: Request) -> Resource:
        return _Page(self, path.decode("ascii", "replace"))

    def render_GET(self, request: Request) -> bytes:
        """``/console`` without its slash: the cluster page is at ``/console/``."""
        request.redirect(b"/console/")
        return b""


class _Page(Resource):
    isLeaf = True

    def __init__(self, console: ConsoleResource, name: str) -> None:
        super().__init__()
        self.console = console
        self.name = name

    def render_GET(self, request: Request) -> Any:
        broker = self.console.broker
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"x-content-type-options", b"nosniff")
        render = _RENDERERS.get(self.name)
        if render is None:
            request.setResponseCode(404)
            return _page(broker, "Not found", f"<p>No page {_e(self.name)}.</p>")
        if self.name in ("message", "trace") and broker.acl is not None:
            request.setResponseCode(403)
            return _page(broker, "Refused", "<p>ACL is on: look messages up with an authenticated client.</p>")
        try:
            result = render(broker, request)
        except ValueError as e:
            request.setResponseCode(400)
            return _page(broker, "Bad request", f"<p>{_e(e)}</p>")
        if not isinstance(result, Deferred):
            return result
        finished = []
        request.notifyFinish().addBoth(finished.append)

        def write(body: bytes) -> None:
            if not finished:
                request.write(body)
                request.finish()

        def failed(failure: Any) -> None:
            log.failure("console page {name} failed", failure, name=self.name)
            request.setResponseCode(500)
            write(_page(broker, "Error", f"<p>{_e(failure.getErrorMessage())}</p>"))

        result.addCallbacks(write, failed)
        return NOT_DONE_YET


# -- pages


def _cluster(broker: BrokerController, request: Request) -> Deferred[bytes]:
    async def render() -> bytes:
        rows: list[Sequence[Any]] = []
        group_addrs: list[str] = []  # this broker's name's members, as the NameServer lists them
        error = ""
        for addr in broker.config.namesrv_addrs:
            try:
                response = await broker.namesrv_client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3.0
                )
                info = fastjson.loads(response.body)
            except Exception as e:  # the page still shows this broker
                error = f"<p>Name server {_e(addr)} did not answer: {_e(e)}</p>"
                continue
            table = info.get("brokerAddrTable", {})
            for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
                for name in sorted(names):
                    addrs = table.get(name, {}).get("brokerAddrs", {})
                    for bid, baddr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                        role = "master" if int(bid) == 0 else "slave"
                        rows.append((cluster, name, int(bid), role, baddr))
                        if name == broker.config.brokerName and cluster == broker.config.brokerClusterName:
                            group_addrs.append(baddr)
            error = ""
            break
        store = broker.store
        uptime = int(time.time() - broker.boot_timestamp / 1000)
        this = [
            ("role", broker.config.brokerRole),
            ("up", f"{uptime // 3600} h {uptime // 60 % 60} min {uptime % 60} s"),
            ("put TPS", f"{broker.put_tps():.1f}"),
            ("get TPS", f"{broker.get_tps():.1f}"),
            ("messages put since start", broker.put_total),
            ("messages got since start", broker.get_total),
            ("commitlog min offset", store.get_min_phy_offset()),
            ("commitlog max offset", store.get_max_phy_offset()),
            ("disk used", f"{broker.disk_ratio() * 100:.1f} %"),
            ("topics", len(broker.topics.table)),
            ("subscription groups", len(broker.groups.table)),
        ]
        content = (
            "<h2>Brokers</h2>"
            + error
            + _table(("cluster", "broker name", "broker id", "role", "address"), rows)
            + "<h2>This broker</h2>"
            + _table(("figure", "value"), this)
        )
        if broker.dledger is not None:
            content += "<h2>DLedger group</h2>" + await _dledger_members(broker, group_addrs)
        return _page(broker, "Cluster", content)

    return Deferred.fromCoroutine(render())


_DLEDGER_COLUMNS = (
    ("dLedgerSelfId", "member"),
    ("dLedgerRole", "role"),
    ("dLedgerTerm", "term"),
    ("dLedgerLeaderId", "leader"),
    ("dLedgerLedgerEndIndex", "ledger end index"),
    ("dLedgerCommittedIndex", "committed index"),
)


async def _dledger_members(broker: BrokerController, addrs: list[str]) -> str:
    """Each member's DLedger state: this broker's own, the others' from their GET_BROKER_RUNTIME_INFO (a member
    the NameServer does not list, or that does not answer, is left out or says so)."""
    assert broker.dledger is not None
    own = broker.config.broker_addr
    others = [addr for addr in addrs if addr != own]
    answers = await DeferredList(
        [
            broker.namesrv_client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3.0)
            for addr in others
        ],
        consumeErrors=True,
    )
    tables = [(own, broker.dledger.runtime_info())]
    for addr, (ok, response) in zip(others, answers, strict=True):
        try:
            table = fastjson.loads(response.body)["table"] if ok and response.body else {}
        except ValueError:
            table = {}
        tables.append((addr, table))
    rows = []
    for addr, table in sorted(tables, key=lambda t: str(t[1].get("dLedgerSelfId", "~"))):
        if "dLedgerRole" not in table:
            rows.append((addr, "did not answer", *(["-"] * (len(_DLEDGER_COLUMNS) - 1))))
            continue
        rows.append((addr, *(_figure(table.get(key, "")) for key, _ in _DLEDGER_COLUMNS)))
    return _table(("address", *(name for _, name in _DLEDGER_COLUMNS)), rows)


def _figure(text: str) -> Any:
    return int(text) if text.lstrip("-").isdigit() else text


def _topic_link(topic: str) -> str:
    return f'<a href="/console/topics?topic={quote(topic)}">{_e(topic)}</a>'


def _topics(broker: BrokerController, request: Request) -> bytes:
    store = broker.store
    topic = _arg(request, "topic")
    if topic:
        problem = topic_problem(topic)
        if problem is not None:
            raise ValueError(problem)
        tc = broker.topics.select(topic)
        if tc is None:
            raise ValueError(f"topic {topic} does not exist on this broker")
        rows = []
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            low = max(store.get_min_offset_in_queue(topic, qid), 0)
            high = max(store.get_max_offset_in_queue(topic, qid), 0)
            last = store.get_message_store_timestamp(topic, qid, high - 1) if high > 0 else 0
            rows.append((qid, low, high, high - low, _ms(last)))
        groups = sorted(broker.offsets.groups_of_topic(topic))
        content = _table(("queue", "min offset", "max offset", "messages", "last stored"), rows) + (
            "<h2>Consumed by</h2>"
            + _table(("group",), ([f'<a href="/console/groups?group={quote(g)}">{_e(g)}</a>'] for g in groups), (0,))
        )
        return _page(broker, f"Topic {topic}", content)
    rows = []
    for name, tc in sorted(broker.topics.table.items()):
        stored = sum(max(store.get_max_offset_in_queue(name, q), 0) for q in range(tc.write_queue_nums))
        perm, order = PermName.perm_to_string(tc.perm), str(tc.order).lower()  # as TopicConfig prints them
        rows.append((_topic_link(name), tc.read_queue_nums, tc.write_queue_nums, perm, order, stored))
    headers = ("topic", "read queues", "write queues", "perm", "order", "messages stored")
    return _page(broker, "Topics", _table(headers, rows, (0,)))


def _groups(broker: BrokerController, request: Request) -> bytes:
    group = _arg(request, "group")
    # One pass over the offset table: group → its committed queues.
    committed: dict[str, list[tuple[str, int]]] = {}
    for key, queues in broker.offsets.offset_table.items():
        topic, _, g = key.rpartition("@")
        committed.setdefault(g, []).extend((topic, qid) for qid in queues)

    popping = {group for (_, group, _), _ in broker.pop.inflight.items()}

    def lag_rows(g: str) -> list[tuple[Any, ...]]:
        rows = []
        for topic, qid in sorted(committed.get(g, ())):
            high, consumed, last = broker.consume_progress(g, topic, qid)
            inflight = sum(broker.inflight(g, topic, qid))
            rows.append((topic, qid, high, consumed, max(high - consumed, 0), inflight, _ms(last)))
        return rows

    def consume_type(g: str) -> str:
        """POP for a group online as one (Apache's test), or with pops in flight or a pop retry topic here."""
        cg = broker.consumers.get(g)
        if cg is not None and cg.channels:
            return ConsumeType(cg.consume_type).shown
        pop_retry = f"{RETRY_GROUP_TOPIC_PREFIX}{g}_"
        return "POP" if g in popping or any(t.startswith(pop_retry) for t, _ in committed.get(g, ())) else "-"

    if group:
        cg = broker.consumers.get(group)
        rows = lag_rows(group)
        clients = [(i.client_id, i.channel.peer, i.language, i.version) for i in cg.channels.values()] if cg else []
        headers = ("topic", "queue", "broker offset", "consumer offset", "lag", "inflight", "last consumed")
        content = (
            f"<p>Consume type: {_e(consume_type(group))}</p>"
            + _total_lag(sum(r[4] for r in rows))
            + f"<p>Messages in flight: {sum(r[5] for r in rows)}</p>"
            + _table(headers, rows)
            + "<h2>Clients online</h2>"
            + _table(("client id", "address", "language", "version"), clients)
        )
        return _page(broker, f"Consumer group {group}", content)
    names = sorted(set(broker.groups.table) | set(committed))
    rows = []
    for g in names:
        cg = broker.consumers.get(g)
        progress = lag_rows(g)
        link = f'<a href="/console/groups?group={quote(g)}">{_e(g)}</a>'
        online = len(cg.channels) if cg else 0
        model = cg.message_model.name if cg else "-"
        rows.append((link, online, consume_type(g), model, sum(r[4] for r in progress), sum(r[5] for r in progress)))
    headers = ("group", "clients online", "consume type", "model", "lag", "inflight")
    return _page(broker, "Consumer groups", _table(headers, rows, (0,)))


def _total_lag(lag: int) -> str:
    """Red only when messages are waiting."""
    return f"<p>Total lag: <span class='lag'>{lag}</span></p>" if lag else "<p>Total lag: 0</p>"


_LOOKUP_FORM = """<form action="/console/message" method="get">
<label>Message id (offsetMsgId) <input name="id" size="40" value="{id}"></label> or
<label>topic <input name="topic" value="{topic}"></label>
<label>key or msgId (UNIQ_KEY) <input name="key" value="{key}"></label> <button>Look up</button></form>"""


def _message_html(m: MessageExt) -> str:
    rows = [
        ("topic", m.topic),
        ("msgId", m.client_msg_id),
        ("offsetMsgId", m.msg_id),
        ("queue", f"{m.queue_id} @ {m.queue_offset}"),
        ("tags", m.tags or ""),
        ("keys", m.keys or ""),
        ("born", f"{_ms(m.born_timestamp)} from {m.born_host}"),
        ("stored", f"{_ms(m.store_timestamp)} on {m.store_host}"),
        ("reconsume times", m.reconsume_times),
        ("properties", "; ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))),
    ]
    body = m.body[:_BODY_SHOWN].decode("utf-8", "replace")
    more = f" ({len(m.body)} bytes, first {_BODY_SHOWN} shown)" if len(m.body) > _BODY_SHOWN else ""
    return _table(("field", "value"), rows) + f"<p>Body{_e(more)}:</p><pre>{_e(body)}</pre>"


def _message(broker: BrokerController, request: Request) -> bytes:
    msg_id, topic, key = _arg(request, "id"), _arg(request, "topic"), _arg(request, "key")
    form = _LOOKUP_FORM.format(id=_e(msg_id), topic=_e(topic), key=_e(key))
    found: list[MessageExt] = []
    if msg_id:
        try:
            _, offset = decode_offset_message_id(msg_id)
        except ValueError as e:  # the form again, to correct the id in
            request.setResponseCode(400)
            return _page(broker, "Messages", form + f"<p>{_e(e)}</p>")
        m = look_message(broker.store, offset)
        found = [m] if m is not None else []
    elif topic and key:
        problem = topic_problem(topic)
        if problem is not None:
            raise ValueError(problem)
        found = _by_key(broker, topic, key)
    if not (msg_id or key):
        return _page(broker, "Messages", form)
    results = "".join(_message_html(m) for m in found) or "<p>No message found.</p>"
    return _page(broker, "Messages", form + f"<p>{len(found)} found</p>" + results)


def _by_key(broker: BrokerController, topic: str, key: str) -> list[MessageExt]:
    """Messages indexed under ``key`` (KEYS or UNIQ_KEY) in ``topic``, oldest first."""
    result = broker.store.query_message(topic, key, 32, 0, int(time.time() * 1000) + 60_000)
    out = []
    for record in result.buffers:
        try:
            out.extend(decode_records(record))
        except RecordError:
            continue
    return out


def _trace(broker: BrokerController, request: Request) -> bytes:
    msg_id = _arg(request, "id")
    form = (
        '<form action="/console/trace" method="get"><label>Message id (msgId) '
        f'<input name="id" size="40" value="{_e(msg_id)}"></label> <button>Show trace</button></form>'
    )
    if not msg_id:
        return _page(broker, "Message trace", form)
    topic = broker.config.msgTraceTopicName or TRACE_TOPIC
    views = trace_views(_by_key(broker, topic, msg_id), msg_id)
    rows = [
        (v.trace_type, v.group, v.client_host, _ms(v.timestamp), f"{v.cost_time} ms", "ok" if v.success else "failed")
        for v in views
    ]
    table = _table(("type", "group", "client host", "time", "cost", "status"), rows)
    return _page(broker, "Message trace", form + (table if rows else "<p>No trace found.</p>"))


def _throughput(broker: BrokerController, request: Request) -> bytes:
    history = list(broker.stats.history)
    points = [
        (t1, (p1 - p0) * 1000 / max(t1 - t0, 1), (g1 - g0) * 1000 / max(t1 - t0, 1))
        for (t0, p0, g0), (t1, p1, g1) in pairwise(history)
    ]
    content = _chart(points) + _table(
        ("time", "put TPS", "get TPS"), ((_ms(t), f"{p:.1f}", f"{g:.1f}") for t, p, g in reversed(points[-12:]))
    )
    return _page(broker, "Throughput (last 30 minutes)", content)


def _chart(points: list[tuple[int, float, float]]) -> str:
    """An SVG line chart of put (blue) and get (green) TPS."""
    width, height, pad = 900, 260, 40
    if len(points) < 2:
        return "<p>Not enough samples yet (one every 10 s).</p>"
    t0, t1 = points[0][0], points[-1][0]
    top = max(max(p for _, p, _ in points), max(g for _, _, g in points), 1.0)

    def xy(t: int, v: float) -> str:
        x = pad + (width - 2 * pad) * (t - t0) / max(t1 - t0, 1)
        y = height - pad - (height - 2 * pad) * v / top
        return f"{x:.1f},{y:.1f}"

    put = " ".join(xy(t, p) for t, p, _ in points)
    get = " ".join(xy(t, g) for t, _, g in points)
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="put and get TPS">'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fafafa" stroke="#ccc"/>'
        f'<text x="{pad}" y="20" font-size="12">max {top:.0f} msg/s</text>'
        f'<polyline points="{put}" fill="none" stroke="#1f6feb" stroke-width="2"/>'
        f'<polyline points="{get}" fill="none" stroke="#2da44e" stroke-width="2"/>'
        f'<text x="{width - 200}" y="20" font-size="12" fill="#1f6feb">put TPS</text>'
        f'<text x="{width - 120}" y="20" font-size="12" fill="#2da44e">get TPS</text>'
        f'<text x="{pad}" y="{height - 12}" font-size="11">{_e(_ms(t0))}</text>'
        f'<text x="{width - pad - 120}" y="{height - 12}" font-size="11">{_e(_ms(t1))}</text></svg>'
    )


_RENDERERS: dict[str, Any] = {
    "": _cluster,
    "topics": _topics,
    "groups": _groups,
    "message": _message,
    "trace": _trace,
    "throughput": _throughput,
}
