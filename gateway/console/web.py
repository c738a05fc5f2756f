"""The console's twisted.web resource: sessions, login, CSRF, page and action dispatch, rendering.

Pages render on the server with Jinja2 (autoescape on: every value is escaped), so they work without script.
Every action is a POST carrying the session's CSRF token; with ACL on it needs an admin account logged in (the
console signs its requests with it, as mqadmin does), with ACL off it needs ``consoleWritable=true``.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from gateway.admin.cli import Session
from gateway.admin.ext import AdminError, AdminExt
from gateway.remoting.codes import RequestCode

from . import routes
from .routes import ACTIONS, NAVIGATION, PAGES, BadRequest, Done, Refused, Rendered, View

if TYPE_CHECKING:
    from .charts import Sampler
    from .settings import ConsoleSettings

log = Logger()

COOKIE = b"rmq_console"
SESSION_IDLE_SECONDS = 30 * 60
MAX_SESSIONS = 1000
MAX_FORM_BYTES = 256 * 1024
_HEADERS = {
    b"content-security-policy": b"default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"cache-control": b"no-store",
}
_STATIC_TYPES = {".css": b"text/css; charset=utf-8", ".js": b"text/javascript; charset=utf-8"}


@dataclass
class Account:
    """An account logged in: actions are signed with it."""

    access_key: str
    secret_key: str


@dataclass
class ConsoleSession:
    """One browser's state: its CSRF token, the account logged in, the last action's outcome."""

    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    account: Account | None = None
    flash: str | None = None
    used: float = field(default_factory=time.monotonic)


class Sessions:
    """Sessions by cookie value, bounded in number and idle time."""

    def __init__(self) -> None:
        self._by_id: OrderedDict[str, ConsoleSession] = OrderedDict()

    def get(self, request: Request) -> ConsoleSession:
        """The request's session, made (and its cookie set) when it has none or it expired."""
        now = time.monotonic()
        while self._by_id:
            oldest = next(iter(self._by_id.values()))
            if now - oldest.used < SESSION_IDLE_SECONDS and len(self._by_id) < MAX_SESSIONS:
                break
            self._by_id.popitem(last=False)
        sid = (request.getCookie(COOKIE) or b"").decode("ascii", "replace")
        session = self._by_id.get(sid)
        if session is None:
            sid, session = secrets.token_urlsafe(24), ConsoleSession()
            request.addCookie(COOKIE, sid.encode(), path=b"/", httpOnly=True, sameSite="strict")
        self._by_id[sid] = session
        self._by_id.move_to_end(sid)
        session.used = now
        return session


class ConsoleRequest(Request):
    """A request whose body is dropped past :data:`MAX_FORM_BYTES` (answered 413), so no form grows memory."""

    too_large = False

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > MAX_FORM_BYTES:
            self.too_large = True
        super().gotLength(0 if self.too_large else length)

    def handleContentChunk(self, data: bytes) -> None:
        if not self.too_large:
            super().handleContentChunk(data)


class ClusterAccess:
    """A blocking mqadmin :class:`~gateway.admin.cli.Session` per pool thread for reading (signed with the
    console's account when ACL is on), and one per action for the account acting."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._local = threading.local()
        self._all: list[Session] = []
        self._lock = threading.Lock()

    def reader(self) -> Session:
        """This thread's session, its errors cleared."""
        admin = getattr(self._local, "admin", None)
        if admin is None:
            admin = self._local.admin = self.settings.session()
            with self._lock:
                self._all.append(admin)
        admin.errors.clear()
        return admin

    def acting(self, account: Account | None) -> Session:
        """A session for one action (closed by the caller): the account's when given, else the console's."""
        if account is not None:
            return self.settings.session(account.access_key, account.secret_key)
        return self.settings.session()

    def close(self) -> None:
        with self._lock:
            for admin in self._all:
                admin.close()
            self._all.clear()


def verify_admin(admin: AdminExt, access_key: str) -> None:
    """Refused unless ``access_key`` (which ``admin`` signs with) is an admin account of the cluster: a broker
    shows it the ACL accounts (an admin-only request) and lists it as admin."""
    masters = admin.master_addrs()
    if not masters:
        raise Refused("no broker to check the account with")
    try:
        body = admin.body(admin.call(next(iter(masters.values())), RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG))
    except AdminError as e:
        raise Refused(f"login refused: {e.remark or e}") from None
    for entry in body.get("plainAccessConfigs") or ():
        if entry.get("accessKey") == access_key and entry.get("admin") in (True, "true"):
            return
    raise Refused(f"{access_key} is not an admin account")


class ConsoleResource(Resource):
    """The whole console under one resource: ``/static/*``, the registered pages and actions, login/logout."""

    isLeaf = True

    def __init__(self, settings: ConsoleSettings, sampler: Sampler | None = None) -> None:
        super().__init__()
        from . import pages  # noqa: F401  (registers the pages and actions)

        self.settings = settings
        self.sampler = sampler
        self.access = ClusterAccess(settings)
        self.sessions = Sessions()
        self.templates = Environment(
            loader=PackageLoader("gateway.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=_shown,
        )
        self.templates.filters["q"] = lambda value: quote(str(value), safe="")

    # -- dispatch

    def render_GET(self, request: Request) -> Any:
        path = _path(request)
        if path.startswith("/static/"):
            return self._static(request, path[len("/static/") :])
        session = self.sessions.get(request)
        handler = PAGES.get(path)
        if handler is None:
            return self._page(request, session, Rendered("error.html", {"error": f"no page {path}"}, 404))
        # The reader is per pool thread: it is taken in the thread that runs the page.
        view = View(_args(request), None, self.settings, self.sampler)  # type: ignore[arg-type]
        return self._run(request, session, lambda: self._read(handler, view))

    def render_POST(self, request: Request) -> Any:
        session = self.sessions.get(request)
        if getattr(request, "too_large", False):
            return self._page(request, session, Rendered("error.html", {"error": "form too large"}, 413))
        args = _args(request)
        if not hmac.compare_digest(args.get("csrf", ""), session.csrf):
            return self._page(request, session, Rendered("error.html", {"error": "stale or missing form token"}, 403))
        path = _path(request)
        if path == "/login":
            return self._run(request, session, lambda: self._login(session, args))
        if path == "/logout":
            session.account, session.flash = None, "logged out"
            return _redirect(request, "/")
        handler = ACTIONS.get(path)
        if handler is None:
            return self._page(request, session, Rendered("error.html", {"error": f"no action {path}"}, 404))
        try:
            self._may_act(session)
        except Refused as e:
            return self._page(request, session, Rendered("error.html", {"error": str(e)}, 403))
        return self._run(request, session, lambda: self._act(handler, session, args))

    # -- work in the thread pool

    def _read(self, handler: routes.PageHandler, view: View) -> Rendered:
        view.admin = self.access.reader()
        page = handler(view)
        # The parts that failed (a broker down) are listed above what the others gave.
        page.context.setdefault("errors", [str(e) for e in view.admin.errors])
        return page

    def _act(self, handler: routes.ActionHandler, session: ConsoleSession, args: dict[str, str]) -> Done:
        admin = self.access.acting(session.account)
        try:
            return handler(View(args, admin, self.settings, self.sampler))
        finally:
            admin.close()

    def _login(self, session: ConsoleSession, args: dict[str, str]) -> Done:
        view = View(args, None, self.settings)  # type: ignore[arg-type]
        access_key, secret_key = view.text("accessKey", max_length=256), view.text("secretKey", max_length=256)
        admin = self.access.acting(Account(access_key, secret_key))
        try:
            verify_admin(admin, access_key)
        finally:
            admin.close()
        session.account = Account(access_key, secret_key)
        return Done(f"logged in as {access_key}", "/")

    def _may_act(self, session: ConsoleSession) -> None:
        if self.settings.acl:
            if session.account is None:
                raise Refused("actions need an admin account: log in first")
        elif not self.settings.writable:
            raise Refused("this console is read-only (consoleWritable=false)")

    def _run(self, request: Request, session: ConsoleSession, work: Any) -> Any:
        gone: list[bool] = []  # the browser left before the work was done: nothing to answer
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def finish(body: bytes) -> None:
            if not gone:
                request.write(body)
                request.finish()

        def done(result: Rendered | Done) -> None:
            if isinstance(result, Done):
                session.flash = result.message
                finish(_redirect(request, result.back))
            else:
                finish(self._page(request, session, result))

        def failed(failure: Any) -> None:
            error = failure.value
            if isinstance(error, BadRequest):
                status = 400
            elif isinstance(error, Refused):
                status = 403
            elif isinstance(error, (AdminError, OSError)):
                status = 502
            else:
                log.failure("console page {path}", failure, path=_path(request))
                error, status = "internal error (see the console's log)", 500
            finish(self._page(request, session, Rendered("error.html", {"error": str(error)}, status)))

        deferToThread(work).addCallbacks(done, failed)
        return NOT_DONE_YET

    # -- output

    def _page(self, request: Request, session: ConsoleSession, page: Rendered) -> bytes:
        request.setResponseCode(page.status)
        for name, value in _HEADERS.items():
            request.setHeader(name, value)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        flash, session.flash = session.flash, None
        context = {
            "nav": NAVIGATION,
            "path": _path(request),
            "csrf": session.csrf,
            "account": session.account.access_key if session.account else None,
            "acl": self.settings.acl,
            "can_act": session.account is not None if self.settings.acl else self.settings.writable,
            "namesrv": self.settings.namesrv,
            "flash": flash,
            **page.context,
        }
        return self.templates.get_template(page.template).render(context).encode()

    def _static(self, request: Request, name: str) -> bytes:
        kind = _STATIC_TYPES.get(name[name.rfind(".") :]) if "." in name else None
        source = resources.files("gateway.console") / "static" / name
        if kind is None or "/" in name or name.startswith(".") or not source.is_file():
            request.setResponseCode(404)
            return b"not found"
        request.setHeader(b"content-type", kind)
        request.setHeader(b"x-content-type-options", b"nosniff")
        return source.read_bytes()


def _shown(value: Any) -> Any:
    """Values as RocketMQ's tools print them: Java's booleans, ``-`` for none."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "-" if value is None else value


def _path(request: Request) -> str:
    path = urlsplit(request.uri.decode("ascii", "replace")).path
    return path.rstrip("/") or "/"


def _args(request: Request) -> dict[str, str]:
    """The first value of each argument (query string or form), as text."""
    return {k.decode("utf-8", "replace"): v[0].decode("utf-8", "replace") for k, v in (request.args or {}).items() if v}


def _redirect(request: Request, back: str) -> bytes:
    # Only paths of this console: never an absolute URL from a form.
    target = back if back.startswith("/") and not back.startswith("//") else "/"
    request.setResponseCode(303)
    request.setHeader(b"location", target.encode())
    return b""
