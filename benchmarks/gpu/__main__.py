"""`python -m benchmarks.gpu`: gpu.py's main()."""

from benchmarks.gpu.gpu import main

if __name__ == "__main__":
    main()
