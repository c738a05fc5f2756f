"""What a NameServer and a broker load at start-up: nothing they only need for a feature that is off (memory:
benchmarks/rss.py). The SQL92 grammar loads with the first SQL92 subscription, Raft with a controller."""

from __future__ import annotations

import subprocess
import sys

import pytest

# TLS (pyOpenSSL and cryptography, which Twisted's reactor would import: gateway.lean_reactor), ACL files (YAML)
# and PROM metrics (prometheus-client, twisted.web) are off by default.
OPTIONAL = ["OpenSSL", "cryptography", "service_identity", "yaml", "prometheus_client", "twisted.web.server"]


@pytest.mark.parametrize(
    ("module", "absent"),
    [
        ("gateway.namesrv.__main__", ["pysyncobj", "gateway.controller.raft", *OPTIONAL]),
        ("gateway.broker.__main__", ["lark", *OPTIONAL]),
        ("gateway.__main__", ["lark", "pysyncobj", *OPTIONAL]),
    ],
)
def test_features_that_are_off_are_not_loaded(module: str, absent: list[str]) -> None:
    code = (
        f"import sys, {module}; from twisted.internet import reactor; "
        f"print(type(reactor).__name__, sorted(m for m in {absent!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "LeanEPollReactor []"


def test_the_sql92_grammar_loads_on_first_use() -> None:
    code = "import sys, gateway.filter as f; f.compile_expression('SQL92', 'a > 1'); print('lark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"
