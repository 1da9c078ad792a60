"""`python -m benchmarks.rpc_serving`: rpc_serving.py's main()."""

from benchmarks.rpc_serving.rpc_serving import main

if __name__ == "__main__":
    main()
