"""Imports every page and action module, so each registers itself with :mod:`.routes`."""

from . import (  # noqa: F401
    actions,
    broker_pages,
    charts,
    cluster_pages,
    group_pages,
    message_pages,
    producer_pages,
    topic_pages,
)
