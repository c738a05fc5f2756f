"""Error remarks name what went wrong, never a server file path or a source line (issue 8 item 10)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.remoting.codes import ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher


class _Channel:
    peer = "127.0.0.1:1"

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    def send_command(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


def _answer(exc: BaseException) -> RemotingCommand:
    dispatcher = RequestDispatcher()

    def handler(_channel: Any, _request: RemotingCommand) -> None:
        raise exc

    dispatcher.register(17, handler)
    channel = _Channel()
    dispatcher.dispatch(channel, RemotingCommand.request(17, {}))  # type: ignore[arg-type]
    (response,) = channel.sent
    return response


@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (FileNotFoundError(2, "No such file or directory", "/srv/secret/store/config/topics.json"), "No such file"),
        (PermissionError(13, "Permission denied", "/etc/rocketmq/tls.properties"), "Permission denied"),
        (ValueError("bad value"), "ValueError: bad value"),
    ],
)
def test_remark_has_no_path_and_no_source_line(exc: BaseException, shown: str) -> None:
    response = _answer(exc)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert shown in response.remark
    assert "/" not in response.remark and ".py" not in response.remark
