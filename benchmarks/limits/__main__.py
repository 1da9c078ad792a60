"""`python -m benchmarks.limits`: limits.py's main()."""

from benchmarks.limits.limits import main

if __name__ == "__main__":
    main()
