"""`python -m benchmarks.vs_leanrl`: vs_leanrl.py's main()."""

from benchmarks.vs_leanrl.vs_leanrl import main

if __name__ == "__main__":
    main()
