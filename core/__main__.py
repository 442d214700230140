"""``python -m core`` is the ``traindesk`` command line."""

import sys

try:
    from core.cli import main
except KeyboardInterrupt:  # Ctrl-C in the first moments, before the command's own handling: the same end
    sys.stderr.write("interrupted\n")
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
