"""A sampler that is deterministic by (seed, epoch), shards across ranks and resumes mid-epoch."""
import math

import torch
from torch.utils.data import Sampler


class ResumableSampler(Sampler):
    """Yields this rank's indices for one epoch, starting ``start`` samples in.

    The permutation depends only on (seed, epoch), so a resumed run sees the same order, and
    skipping ``start`` samples never loads them. With several ranks the permutation is padded
    by wrapping (as DistributedSampler) so every rank gets the same number of batches;
    evaluation uses ``pad=False`` so each sample is seen exactly once.
    """

    def __init__(self, size, shuffle=True, seed=0, rank=0, world_size=1, pad=True):
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.pad = pad
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch, start=0):
        self.epoch = epoch
        self.start = start

    def shard_len(self):
        if self.pad:
            return math.ceil(self.size / self.world_size)
        return len(range(self.rank, self.size, self.world_size))

    def indices(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        if self.pad and self.world_size > 1:
            total = self.shard_len() * self.world_size
            order += (order * math.ceil(total / max(len(order), 1)))[: total - len(order)]
        return order[self.rank :: self.world_size]

    def __iter__(self):
        return iter(self.indices()[self.start :])

    def __len__(self):
        return max(self.shard_len() - self.start, 0)
