"""`python -m benchmarks.checkpoints`: checkpoints.py's main()."""

from benchmarks.checkpoints.checkpoints import main

if __name__ == "__main__":
    main()
