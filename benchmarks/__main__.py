"""``python -m benchmarks SUITE [options] [dotted.key=value ...]``: run a benchmark suite and write its
report (what ``asyncrl bench`` ran before the apparatus left the library; docs/benchmarks.md)."""

import sys

from benchmarks.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
