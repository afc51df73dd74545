"""``python -m lightfoot_pipeline.cli``: the ``lightfoot`` command line."""

import sys

from lightfoot_pipeline.cli import main

sys.exit(main())
