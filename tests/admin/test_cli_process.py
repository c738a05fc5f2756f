"""``python -m gateway.admin`` as a process against ``python -m gateway`` (a real NameServer and Broker): what a
shell user sees of failures, bad input, peers that are not RocketMQ and closed pipes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from compat_tests.servers import GatewayServers, free_port
from gateway.admin.ext import AdminExt
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.codes import RequestCode
from gateway.remoting.headers import UpdateConsumerOffsetRequestHeader
from tests.namesrv.support import register_request


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    servers = GatewayServers(tmp_path_factory.mktemp("admin-cli")).start()
    yield servers
    servers.close()


def admin(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gateway.admin", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


def one_line(stderr: str) -> str:
    """The only line of ``stderr``, which must hold no traceback."""
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_reset_offset_by_time_with_no_consumer_online_commits_the_offsets_on_the_broker(
    gateway: GatewayServers,
) -> None:
    """As mqadmin: the broker's 206 CONSUMER_NOT_ONLINE makes the tool commit each queue's offset itself."""
    n = gateway.namesrv_addr
    gateway.create_topic("ResetOffline", 2)
    for i in range(4):
        assert admin("sendMessage", "-n", n, "-t", "ResetOffline", "-p", f"m{i}", "-i", str(i % 2)).returncode == 0
    assert admin("updateSubGroup", "-n", n, "-b", gateway.broker_addr, "-g", "OfflineGroup").returncode == 0
    # The group consumed everything and went away.
    with AdminExt(n) as ext:
        for queue_id in (0, 1):
            header = UpdateConsumerOffsetRequestHeader("OfflineGroup", "ResetOffline", queue_id, 2).encode()
            ext.call(gateway.broker_addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)

    reset = admin("resetOffsetByTime", "-n", n, "-g", "OfflineGroup", "-t", "ResetOffline", "-s", "0", "--json")
    assert reset.returncode == 0, reset.stderr
    rows = json.loads(reset.stdout)
    assert [(r["queueId"], r["consumerOffset"], r["rollbackOffset"]) for r in rows] == [(0, 2, 0), (1, 2, 0)]
    assert "no consumer of OfflineGroup online" in reset.stderr

    progress = admin("consumerProgress", "-n", n, "-g", "OfflineGroup", "-t", "ResetOffline", "--json")
    assert progress.returncode == 0, progress.stderr
    table = json.loads(progress.stdout)
    assert [r["consumerOffset"] for r in table["offsetTable"]] == [0, 0]
    assert table["diffTotal"] == 4  # the table's "Diff Total: 4", as a number
    assert "Diff Total: 4" in admin("consumerProgress", "-n", n, "-g", "OfflineGroup", "-t", "ResetOffline").stdout


def test_a_failed_part_exits_1_with_the_error_on_stderr(gateway: GatewayServers) -> None:
    n = gateway.namesrv_addr
    gateway.create_topic("ResetNobody", 2)
    # No offsets at all for this group: the broker refuses (CODE 1), and the tool says so.
    reset = admin("resetOffsetByTime", "-n", n, "-g", "NobodyGroup", "-t", "ResetNobody", "-s", "now")
    assert reset.returncode == 1
    assert "resetOffsetByTime command failed: INVOKE_BROKER_TO_RESET_OFFSET" in reset.stderr
    assert "THe consumer group <NobodyGroup> not exist" in reset.stderr
    reset = admin("resetOffsetByTime", "-n", n, "-g", "NobodyGroup", "-t", "ResetNobody", "-s", "now", "--json")
    assert reset.returncode == 1
    error = json.loads(reset.stderr.splitlines()[-1])
    assert error["command"] == "resetOffsetByTime" and [e["code"] for e in error["errors"]] == [1]

    # A second broker the name server lists but nobody can reach: clusterList still lists both, and fails.
    dead = f"127.0.0.1:{free_port()}"
    with BlockingConnection(n) as registration:  # the name server drops it when this connection closes
        assert registration.invoke(register_request("broker-dead", dead, {})).code == 0
        listed = admin("clusterList", "-n", n, "--json")
        assert listed.returncode == 1
        rows = {r["brokerName"]: r for r in json.loads(listed.stdout)}
        assert rows["broker-a"]["activated"] is True and isinstance(rows["broker-a"]["inTPS"], float)
        assert rows["broker-dead"]["activated"] is None
        (error,) = json.loads(listed.stderr)["errors"]
        assert error["error"].startswith(f"{dead}: ")


@pytest.fixture
def http_server() -> Iterator[str]:
    """A peer that answers as an HTTP server does."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    thread.join(5)


def test_a_peer_that_is_not_rocketmq_is_named_in_one_line(gateway: GatewayServers, http_server: str) -> None:
    result = admin("clusterList", "-n", http_server)
    assert result.returncode == 1
    assert one_line(result.stderr) == (
        f"clusterList command failed: {http_server} is not a RocketMQ server (it answered: bad frame length "
        f"{int.from_bytes(b'HTTP', 'big')})"
    )
    result = admin("brokerStatus", "-n", gateway.namesrv_addr, "-b", http_server, "--json")
    assert result.returncode == 1
    assert json.loads(one_line(result.stderr))["errors"][0]["error"].startswith(f"{http_server} is not a RocketMQ")
    # The next name server of the list answers instead.
    assert admin("topicList", "-n", f"{http_server};{gateway.namesrv_addr}").returncode == 0


def test_name_server_addresses(gateway: GatewayServers) -> None:
    port = gateway.namesrv_addr.rpartition(":")[2]
    for bad in ("localhost", "127.0.0.1:", "127.0.0.1:port", "127.0.0.1:70000"):
        result = admin("topicList", "-n", bad)
        assert result.returncode == 2
        assert f"-n: bad address '{bad.rpartition(';')[2]}': want host:port" in one_line(result.stderr)
    result = admin("topicList", env={"NAMESRV_ADDR": "localhost"})
    assert result.returncode == 2 and "NAMESRV_ADDR: bad address 'localhost'" in one_line(result.stderr)
    assert "TBW102" in json.loads(admin("topicList", "-n", f"localhost:{port}", "--json").stdout)
    assert admin("topicList", "-n", f"127.0.0.1:1;localhost:{port}").returncode == 0
    assert admin("topicList", env={"NAMESRV_ADDR": gateway.namesrv_addr}).returncode == 0
    refused = admin("topicList", "-n", "127.0.0.1:1")
    assert refused.returncode == 1 and "127.0.0.1:1: [Errno 111] Connection refused" in one_line(refused.stderr)
    usage = admin("topicList", "--help", env={"NAMESRV_ADDR": "", "COLUMNS": "200"}).stdout
    assert "name servers (default: NAMESRV_ADDR from the environment, else 127.0.0.1:9876)" in usage
    usage = admin("topicList", "--help", env={"NAMESRV_ADDR": gateway.namesrv_addr, "COLUMNS": "200"}).stdout
    assert f"name servers (default: {gateway.namesrv_addr}, from NAMESRV_ADDR)" in usage


def test_time_options_say_their_format() -> None:
    usage = " ".join(admin("printMsg", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "-s TIME, --beginTimestamp TIME from: ms since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS" in usage
    assert "-e TIME, --endTimestamp TIME to: ms since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS" in usage
    result = admin("printMsg", "-t", "T", "-s", "2024-01-01 10:00")
    assert result.returncode == 2
    assert "bad time '2024-01-01 10:00': want ms since the epoch" in one_line(result.stderr)


def test_print_msg_into_a_closed_pipe_exits_quietly(gateway: GatewayServers) -> None:
    """``printMsg ... | head -1``: the reader leaves early; no traceback, the status of a tool SIGPIPE ended."""
    gateway.create_topic("PipeTopic", 1)
    body = "x" * 100_000  # more than a pipe holds
    assert admin("sendMessage", "-n", gateway.namesrv_addr, "-t", "PipeTopic", "-p", body).returncode == 0
    command = [sys.executable, "-m", "gateway.admin", "printMsg", "-n", gateway.namesrv_addr, "-t", "PipeTopic"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("Topic")
        proc.stdout.close()
        stderr = proc.stderr.read()
        assert proc.wait(30) == 141, stderr
    assert stderr == ""
