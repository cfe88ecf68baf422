import sys

from benchmarks.control.run import main

sys.exit(main(sys.argv[1:]))
