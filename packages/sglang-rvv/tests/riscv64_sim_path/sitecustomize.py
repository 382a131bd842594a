"""On this directory's PYTHONPATH every Python process (SGLang's spawned scheduler and
detokenizer too) starts in the riscv64 simulation of riscv64_sim.py."""

import riscv64_sim  # noqa: F401
