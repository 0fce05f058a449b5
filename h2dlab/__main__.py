"""``python -m h2dlab``: the ``h2dlab`` command."""

import sys

from h2dlab.cli import main

sys.exit(main())
