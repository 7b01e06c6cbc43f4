"""``python -m executor --plan plan.json``: what ``torchrun -m executor`` starts in every process."""

import sys

from executor.cli import main

sys.exit(main())
