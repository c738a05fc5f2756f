"""``python -m gateway.admin``: mqadmin's subcommands."""

import sys

from .cli import main

sys.exit(main())
