"""`python -m virtbench.cli`: the same command as `virtbench`."""

from . import main

if __name__ == "__main__":
    main()
