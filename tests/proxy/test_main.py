"""``python -m gateway.proxy`` as an operator runs it: the ready line, a gRPC answer, one-line start-up errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc

from compat_tests.servers import default_sigint
from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"rocketmq-gateway proxy ready: gRPC on 127\.0\.0\.1:(\d+), name server (\S+)")


def run(tmp_path: Path, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gateway.proxy", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def test_serves_until_sigint(tmp_path: Path) -> None:
    # No NameServer listens there: the proxy starts anyway and answers a route query with its failure.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "gateway.proxy", "-n", dead, "--port", "0", "--bind", "127.0.0.1"]
    with subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=default_sigint,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if m := READY.search(line):
                    break
            else:
                raise AssertionError("no ready line")
            assert m.group(2) == dead
            with grpc.insecure_channel(f"127.0.0.1:{m.group(1)}") as channel:
                fn = channel.unary_unary(
                    "/apache.rocketmq.v2.MessagingService/QueryRoute",
                    spb.QueryRouteRequest.SerializeToString,
                    spb.QueryRouteResponse.FromString,
                )
                request = spb.QueryRouteRequest(topic=pb.Resource(name="T"))
                response = fn(request, timeout=10, metadata=[("x-mq-client-id", "cli-test")])
            assert response.status.code == pb.Code.INTERNAL_SERVER_ERROR and "name server" in response.status.message
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
            assert "Traceback" not in proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()


def test_busy_port_and_bad_values_end_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run(tmp_path, "--port", str(port), "--bind", "127.0.0.1")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [f"cannot listen on 127.0.0.1:{port}: Address already in use"]
    out = run(tmp_path, "--port", "70000")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "configuration error: command line: key grpcServerPort: 70000 is not from 0 to 65535 (0: any free port)"
    )
    conf = tmp_path / "proxy.properties"
    conf.write_text('innerClientAuthenticationCredentials={"accessKey": 1}\n')
    out = run(tmp_path, "-c", str(conf))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"configuration error: {conf}: key innerClientAuthenticationCredentials: "
        'not a JSON object with "accessKey" and "secretKey"'
    )
    assert "Traceback" not in out.stderr
