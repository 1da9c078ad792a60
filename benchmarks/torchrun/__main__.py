"""`python -m benchmarks.torchrun`: torchrun.py's main()."""

from benchmarks.torchrun.torchrun import main

if __name__ == "__main__":
    main()
