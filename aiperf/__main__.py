"""`python -m aiperf` runs the command line."""

import sys

from aiperf.cli import main

sys.exit(main())
