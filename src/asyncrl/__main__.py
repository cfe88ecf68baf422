"""``python -m asyncrl`` (and ``torchrun ... -m asyncrl train ...``): the ``asyncrl`` command."""

import sys

from asyncrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
