"""Imports every page and action module, so each registers itself with :mod:`.routes`."""

from . import cluster_pages  # noqa: F401
