"""Where no compiler built the C extensions, the Python code is selected by itself: ``python -m gateway`` starts
with every extension module of the project hidden (as if it had never been built) and stores and serves messages.
Nothing is built or installed: a ``sitecustomize`` on PYTHONPATH hides the modules from the server process."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path

import pytest

from compat_tests.servers import GatewayServers
from gateway.client import blocking, build_message
from gateway.client.producer import SendStatus

# What pip builds where a compiler is (setup.py): the broker imports these three when they are there.
EXTENSIONS = ["gateway.remoting._codec", "gateway.remoting._sender", "gateway.store._store"]

# Refuses any extension module (a shared library) of the project, and notes each one it refused.
HIDE_EXTENSIONS = """
import importlib.machinery, os, sys

class _NotBuilt:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in ("gateway", "spark"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return None
        with open(os.environ["HIDDEN_EXTENSIONS_LOG"], "a") as log:
            log.write(name + "\\n")
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, _NotBuilt())
"""


def _built(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


def test_the_servers_run_on_python_without_the_extensions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_EXTENSIONS)
    log = tmp_path / "hidden.log"
    log.touch()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(hide), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("HIDDEN_EXTENSIONS_LOG", str(log))
    monkeypatch.delenv("ROCKETMQ_GATEWAY_PURE_PYTHON", raising=False)  # no asking: the fallback is automatic
    servers = GatewayServers(tmp_path / "store").start()
    try:
        servers.create_topic("NoCompilerTopic", 2)
        with blocking.Producer("no_compiler_pg", servers.namesrv_addr) as producer:
            for i in range(20):
                assert producer.send(build_message("NoCompilerTopic", b"m%d" % i)).status is SendStatus.SEND_OK
        with blocking.PullConsumer("no_compiler_cg", servers.namesrv_addr) as consumer:
            queues = consumer.fetch_subscribe_message_queues("NoCompilerTopic")
            bodies = sorted(m.body for mq in queues for m in consumer.pull(mq, "*", 0, 32).messages)
        assert bodies == sorted(b"m%d" % i for i in range(20))
    finally:
        code = servers.stop()
    assert code == 0, "".join(servers.output[-40:])
    # The server did look for each extension built here, and went on without it.
    hidden = set(log.read_text().split())
    assert {name for name in EXTENSIONS if _built(name)} <= hidden
