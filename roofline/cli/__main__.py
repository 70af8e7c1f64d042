"""`python -m roofline.cli`: the `roofline` command."""
import sys

from . import main

sys.exit(main())
