"""``python -m calibrate`` / ``torchrun -m calibrate``."""

import sys

from calibrate.cli import main

sys.exit(main())
