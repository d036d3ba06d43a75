"""Activation checkpointing for the memory_checkpoint hook (docs/memory_checkpoint.rst).

candidates: which submodules may be checkpointed (UP's checkpoint_patterns).
wrap:       switching their forward to torch.utils.checkpoint and back.
profiler:   measuring activation bytes / time per candidate and fitting them to input size.
planner:    choosing, per input-size bucket, the candidates to checkpoint under a budget.
"""
