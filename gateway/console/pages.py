"""Imports every page and action module, so each registers itself with :mod:`.routes`."""

from . import (
    broker_pages,  # noqa: F401
    cluster_pages,  # noqa: F401
)
