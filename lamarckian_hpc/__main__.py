import sys

from .cli import shell_main

sys.exit(shell_main())
