"""`python -m virtbench`: the same command as `virtbench`."""

from .cli import main

if __name__ == "__main__":
    main()
