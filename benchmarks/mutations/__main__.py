"""`python -m benchmarks.mutations`: mutations.py's main()."""

from benchmarks.mutations.mutations import main

if __name__ == "__main__":
    main()
