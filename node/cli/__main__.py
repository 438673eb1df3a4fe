"""``python -m node.cli``: the same program as the ``rkv`` console script."""

import sys

from node.cli.main import main

sys.exit(main())
