"""``python -m core`` is the ``traindesk`` command line."""

import sys

from core.cli import main

if __name__ == "__main__":
    sys.exit(main())
