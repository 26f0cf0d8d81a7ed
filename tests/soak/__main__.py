"""``python -m tests.soak --seconds S --seed N``: see ``tests/soak/run.py``."""

import sys

from tests.soak.run import main

sys.exit(main())
