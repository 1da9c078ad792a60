"""`python -m benchmarks.compile_scope`: compile_scope.py's main()."""

from benchmarks.compile_scope.compile_scope import main

if __name__ == "__main__":
    main()
