"""Producers: the connections of a producer group on a topic's brokers (mqadmin producerConnection)."""

from __future__ import annotations

import argparse

from gateway.admin.cli import CommandFailed, Table, producer_connection

from .routes import Rendered, View, page


@page("/producers", nav="Producers")
def producers(view: View) -> Rendered:
    context: dict = {"title": "Producers", "topic": view.args.get("topic", ""), "group": view.args.get("group", "")}
    if view.args.get("topic") and view.args.get("group"):
        topic, group = view.topic(), view.group()
        try:
            context["connections"] = producer_connection(
                view.admin, argparse.Namespace(topic=topic, producerGroup=group)
            )
        except CommandFailed as e:
            context["connections"] = Table([], ["clientId", "clientAddr", "language", "version"])
            context["missing"] = str(e)
    return Rendered("producers.html", context)
