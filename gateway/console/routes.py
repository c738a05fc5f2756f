"""The console's page and action registry, and what a handler gets.

A page is ``@page("/path")`` on ``def handler(view: View) -> Rendered``; an action is ``@action("/path")`` on
``def handler(view: View) -> Done``. Handlers run in the reactor's thread pool, so a slow broker never holds the
reactor, and talk to the cluster with the blocking mqadmin :class:`~gateway.admin.cli.Session` in ``view.admin``
(its commands give the pages their tables): the console's own account for pages; for actions, the account logged
in, or the console's when ACL is off.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gateway.remoting.message import MessageExt, decode_offset_message_id
from gateway.remoting.names import group_problem, topic_problem

if TYPE_CHECKING:
    from gateway.admin.cli import Session

    from .charts import Sampler
    from .settings import ConsoleSettings


class BadRequest(ValueError):
    """A query or form value the console cannot use: answered 400 with the message."""


class Refused(Exception):
    """An action the session may not run: answered 403 with the message."""


@dataclass
class Rendered:
    """A page: its template, the values the template shows, and a title for the navigation bar."""

    template: str
    context: dict[str, Any] = field(default_factory=dict)
    status: int = 200


@dataclass
class Done:
    """An action's outcome: a line for the operator and the page to go back to (a path of this console)."""

    message: str
    back: str = "/"


@dataclass
class View:
    """What a handler gets: the request's arguments (first value of each), the cluster, the settings and the
    chart sampler."""

    args: Mapping[str, str]
    admin: Session
    settings: ConsoleSettings
    sampler: Sampler | None = None
    broker_name: str = ""  # of the last address checked by broker_addr

    def text(self, name: str, default: str | None = None, max_length: int = 4096) -> str:
        """A free-text argument; BadRequest when it is missing (and no default) or too long."""
        value = self.args.get(name, default)
        if value is None or (value == "" and default is None):
            raise BadRequest(f"{name} is required")
        if len(value) > max_length:
            raise BadRequest(f"{name} is longer than {max_length} characters")
        return value

    def topic(self, name: str = "topic") -> str:
        """A topic name, checked as the brokers check it."""
        return _checked(self.text(name, max_length=255), topic_problem)

    def group(self, name: str = "group") -> str:
        """A consumer or producer group name, checked as the brokers check it."""
        return _checked(self.text(name, max_length=255), group_problem)

    def number(self, name: str, default: int | None = None, low: int = 0, high: int = 1 << 62) -> int:
        """An integer argument in ``low``..``high``."""
        raw = self.args.get(name)
        if raw in (None, "") and default is not None:
            return default
        if raw is None or not re.fullmatch(r"-?\d{1,19}", raw):
            raise BadRequest(f"{name} is not a number: {raw!r}")
        value = int(raw)
        if not low <= value <= high:
            raise BadRequest(f"{name} is not in {low}..{high}: {value}")
        return value

    def offset_msg_id(self, name: str = "id") -> str:
        """An offset message id (store host and commitlog offset, 32 hex digits)."""
        value = self.text(name, max_length=40).strip()
        try:
            decode_offset_message_id(value)
        except ValueError:
            raise BadRequest(f"not an offset message id: {value}") from None
        return value

    def broker_addr(self, addr: str) -> str:
        """``addr`` when the NameServers list a broker there; the console never dials an address it was only
        given by a request (an offset message id names its broker)."""
        for name, data in self.admin.cluster_info().get("brokerAddrTable", {}).items():
            if addr in data.get("brokerAddrs", {}).values():
                self.broker_name = name
                return addr
        raise BadRequest(f"no broker at {addr} in the cluster")

    def message(self, name: str = "id") -> MessageExt:
        """The message the offset message id argument ``name`` names."""
        return self.message_by_id(self.offset_msg_id(name))

    def message_by_id(self, offset_msg_id: str) -> MessageExt:
        """The message an (already checked) offset message id names, from its broker (one the cluster has)."""
        self.broker_addr(decode_offset_message_id(offset_msg_id)[0])
        return self.admin.view_message(offset_msg_id)

    def offset_msg_ids(self, name: str, most: int) -> list[str]:
        """A comma-separated list of at most ``most`` offset message ids."""
        ids = [i.strip() for i in self.text(name, max_length=most * 41).split(",") if i.strip()]
        if not ids or len(ids) > most:
            raise BadRequest(f"{name}: give 1 to {most} offset message ids")
        for value in ids:
            try:
                decode_offset_message_id(value)
            except ValueError:
                raise BadRequest(f"not an offset message id: {value}") from None
        return ids

    def time(self, name: str, default: int | None = None) -> int:
        """ms since the epoch, or a local time as a browser's datetime-local field gives it
        (``yyyy-MM-ddTHH:mm[:ss]``)."""
        raw = (self.args.get(name) or "").strip()
        if not raw:
            if default is None:
                raise BadRequest(f"{name} is required")
            return default
        if raw.isdigit() and len(raw) < 19:
            return int(raw)
        for fmt in ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
            try:
                return int(datetime.strptime(raw, fmt).timestamp() * 1000)
            except ValueError:
                continue
        raise BadRequest(f"{name} is not a time: {raw[:64]!r} (ms since the epoch or yyyy-MM-ddTHH:mm)")

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        """One of ``choices`` (the first when absent)."""
        value = self.args.get(name) or choices[0]
        if value not in choices:
            raise BadRequest(f"{name} must be one of {', '.join(choices)}")
        return value


def _checked(value: str, problem: Callable[[str], str | None]) -> str:
    reason = problem(value)
    if reason is not None:
        raise BadRequest(reason)
    return value


PageHandler = Callable[[View], Rendered]
ActionHandler = Callable[[View], Done]
PAGES: dict[str, PageHandler] = {}
ACTIONS: dict[str, ActionHandler] = {}
# The navigation bar: (path, label), in Dashboard's order whatever order the modules register in.
NAVIGATION: list[tuple[str, str]] = []
_NAV_ORDER = ("/", "/topics", "/groups", "/producers", "/messages", "/dlq", "/trace", "/charts")


def page(path: str, nav: str | None = None) -> Callable[[PageHandler], PageHandler]:
    """Register a GET page at ``path``; ``nav``: its label in the navigation bar."""

    def register(handler: PageHandler) -> PageHandler:
        PAGES[path] = handler
        if nav is not None:
            NAVIGATION.append((path, nav))
            NAVIGATION.sort(key=lambda item: _NAV_ORDER.index(item[0]) if item[0] in _NAV_ORDER else len(_NAV_ORDER))
        return handler

    return register


def action(path: str) -> Callable[[ActionHandler], ActionHandler]:
    """Register a POST action at ``path`` (CSRF-checked, and only for a session allowed to act)."""

    def register(handler: ActionHandler) -> ActionHandler:
        ACTIONS[path] = handler
        return handler

    return register
