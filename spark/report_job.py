"""``spark-submit spark/report_job.py RUN_DIR [RUN_DIR ...] --out DIR``.

The same job as ``pulsarcast report``; under spark-submit the master and the
resources come from the spark-submit command line (docs/metrics.md).
"""

from __future__ import annotations

import sys

from pulsarcast_ipfs._report_job import main

if __name__ == "__main__":
    sys.exit(main())
