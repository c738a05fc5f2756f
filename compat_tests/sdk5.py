"""The official RocketMQ 5 Python SDK (PyPI ``rocketmq-python-client``) in a virtual environment of its own.

Its top-level module ``rocketmq`` collides with the C++ binding (``rocketmq==0.4.4``) of the test
environment, so it lives in a separate venv, created once per machine under
``~/.cache/rocketmq-gateway/sdk5-venv`` (``ROCKETMQ_GATEWAY_SDK5_VENV`` moves it) and reused by every run;
a file lock makes concurrent pytest workers wait for the one creating it. Scenario scripts
(``compat_tests/sdk5/*.py``) run in it as subprocesses: they take one JSON argument and print one JSON line.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

SDK_VERSION = "5.1.2"
SCENARIOS = Path(__file__).parent / "sdk5"


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "rocketmq-gateway" / "sdk5-venv"
    return Path(os.environ.get("ROCKETMQ_GATEWAY_SDK5_VENV") or default)


def sdk5_python() -> str:
    """The venv's interpreter, the venv made (with the SDK installed) on first use."""
    root = venv_dir()
    python = root / "bin" / "python"
    ready = root / f".ready-{SDK_VERSION}"
    if ready.exists():
        return str(python)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be making it: wait for it
        if not ready.exists():
            venv.EnvBuilder(clear=True, with_pip=True).create(root)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 f"rocketmq-python-client=={SDK_VERSION}"],
                check=True,
                timeout=600,
            )  # fmt: skip
            ready.touch()
    return str(python)


def run_scenario(name: str, args: dict[str, Any], timeout: float = 60.0, env: dict[str, str] | None = None) -> Any:
    """Run ``compat_tests/sdk5/<name>.py`` with ``args``; its JSON answer (the last line it prints)."""
    run = subprocess.run(
        [sdk5_python(), str(SCENARIOS / f"{name}.py"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=SCENARIOS,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        raise AssertionError(f"{name} failed (exit {run.returncode}):\n{run.stdout}\n{run.stderr}")
    return json.loads(lines[-1])


if __name__ == "__main__":  # make the venv ahead of a test run (scripts/test does)
    print(sdk5_python(), file=sys.stderr)
