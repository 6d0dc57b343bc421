"""`python -m aiperf_cli` runs the command line."""

import sys

from aiperf_cli.main import main

sys.exit(main())
