"""Admin tools: :class:`AdminExt` (mqadmin's requests over blocking connections) and the
``rocketmq-gateway admin`` command line."""

from .ext import AdminError, AdminExt

__all__ = ["AdminError", "AdminExt"]
