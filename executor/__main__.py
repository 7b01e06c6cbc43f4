"""``python -m pipeplan.executor --plan plan.json``: what ``torchrun -m pipeplan.executor`` starts in every process."""

import sys

from pipeplan.executor.cli import main

sys.exit(main())
