"""``python -m gateway.namesrv -c file`` as an operator runs it: ready line, serves, SIGINT exits cleanly."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from compat_tests.servers import default_sigint
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import ResponseCode

from .support import route_request

ROOT = Path(__file__).resolve().parents[2]


def test_module_starts_serves_and_stops_on_sigint(tmp_path):
    config = tmp_path / "namesrv.properties"
    config.write_text(f"listenPort=0\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path / 'kvConfig.json'}\n")
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        [sys.executable, "-m", "gateway.namesrv", "-c", str(config)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    ) as proc:
        reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
        reader.start()
        try:
            port = None
            while port is None:
                match = re.search(r"NameServer listening on 127\.0\.0\.1:(\d+)", lines.get(timeout=20))
                port = int(match.group(1)) if match else None
            assert _route_code(port, "NoSuchTopic") == ResponseCode.TOPIC_NOT_EXIST
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(timeout=5)
    output = "".join(lines.queue)
    assert "NameServer stopped" in output
    assert "Traceback" not in output


def _route_code(port: int, topic: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode(route_request(topic)))
        decoder = FrameDecoder()
        responses = []
        while not responses:
            responses = decoder.feed(sock.recv(65536))
    return responses[0].code
