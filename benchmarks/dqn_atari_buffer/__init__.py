"""DQN Atari's replay buffer (docs/dqn_atari_buffer.md): dqn_atari_buffer.py, `python -m benchmarks.dqn_atari_buffer`."""
