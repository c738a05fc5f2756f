"""The cluster console: RocketMQ Dashboard's pages and actions for a whole cluster, found through its
NameServers and read over remoting (ours or Apache's 4.9/5.x), served by twisted.web.

Layers, in the order data flows: :mod:`.settings` (what the operator chose), :mod:`.routes` (the page and action
registry and what a handler gets), the page modules (blocking reads over :class:`gateway.admin.ext.AdminExt`, run in
the reactor's thread pool), :mod:`.web` (sessions, login, CSRF, rendering with Jinja2's autoescape) and
:mod:`.server` (the standalone ``rocketmq-gateway console`` and the NameServer's ``consoleEnable``).
"""
