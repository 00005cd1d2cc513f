"""The storage benchmark's historical entry point; the run lives in ``bench/run.py``.

    python bench/bench.py [--quick] [--only MODULE] [--markdown] [--all]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import main

if __name__ == "__main__":
    sys.exit(main())
