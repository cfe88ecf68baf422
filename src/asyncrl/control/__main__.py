import sys

from asyncrl.control.run import main

sys.exit(main(sys.argv[1:]))
