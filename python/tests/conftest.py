"""pytest set-up for momoe_torch's unit tests: the package is imported from this checkout."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
