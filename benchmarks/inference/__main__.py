"""`python -m benchmarks.inference`: inference.py's main()."""

from benchmarks.inference.inference import main

if __name__ == "__main__":
    main()
