"""`python -m harness.compat`: see harness.compat.run."""

import sys

from .run import main

sys.exit(main())
