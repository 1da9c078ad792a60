"""`python -m benchmarks.dqn_atari_buffer`: dqn_atari_buffer.py's main()."""

from benchmarks.dqn_atari_buffer.dqn_atari_buffer import main

if __name__ == "__main__":
    main()
