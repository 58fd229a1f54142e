"""``python -m jaxsched COMMAND``: the ``jaxsched`` command (``jaxsched/cli.py``)."""

import sys

from jaxsched.cli import main

sys.exit(main())
