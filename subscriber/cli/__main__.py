"""``python -m subscriber.cli``: the same as the ``lccn-subscriber`` console script."""

import sys

from subscriber.cli.root import main

sys.exit(main())
