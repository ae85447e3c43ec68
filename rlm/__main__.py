import sys

from rlm.cli import main

sys.exit(main())
