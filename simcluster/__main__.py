"""``python -m simcluster`` runs the CLI."""

import sys

from simcluster.cli import main

sys.exit(main())
