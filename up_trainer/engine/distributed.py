"""Process-group facts the trainer needs; a single process is a world of one.

Every collective here must be called by all ranks in the same order (hooks that reduce
values for logging do it on every rank, before checking ``is_main``).
"""
import torch
import torch.distributed as torch_dist

# Records per rank per gather round at evaluation: detection records with 100 boxes pickle to a
# few kB each, so a round stays within tens of MB per rank whatever the size of the val set.
GATHER_CHUNK_RECORDS = 1024


class DistInfo:
    def __init__(self):
        self.enabled = torch_dist.is_available() and torch_dist.is_initialized()
        self.rank = torch_dist.get_rank() if self.enabled else 0
        self.world_size = torch_dist.get_world_size() if self.enabled else 1

    @property
    def is_main(self):
        return self.rank == 0

    def _device(self):
        # NCCL reduces only CUDA tensors; gloo only CPU ones.
        if self.enabled and torch_dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def barrier(self):
        if self.enabled:
            torch_dist.barrier()

    def broadcast_object(self, obj):
        if not self.enabled:
            return obj
        box = [obj]
        torch_dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_object(self, obj):
        """Every rank's ``obj`` as a list on rank 0 (rank order); None elsewhere."""
        if not self.enabled:
            return [obj]
        gathered = [None] * self.world_size if self.is_main else None
        torch_dist.gather_object(obj, gathered, dst=0)
        return gathered

    def gather_results(self, results, chunk_records=GATHER_CHUNK_RECORDS):
        """Every rank's per-sample records on rank 0, each sample once.

        Records carrying an ``index`` are de-duplicated by it (a padded sampler repeats samples)
        and sorted, so the merged list equals a single-process evaluation. Without ``index`` the
        shards are interleaved back, which inverts the strided ``rank::world_size`` split.

        The records travel in rounds of at most ``chunk_records`` per rank (every rank sends its
        chunk k in round k, an empty one once it has run out), so the pickled bytes in flight
        are one chunk per rank, not every rank's whole list at once; ``None`` sends everything
        in one round.
        """
        if not self.enabled:
            return results
        results = list(results)
        chunks = plan_chunks(len(results), chunk_records)
        # Ranks hold different numbers of records: all take part in as many rounds as the
        # longest needs (gather_object is a collective every rank must enter).
        rounds = int(self.all_reduce_max(len(chunks)))
        gathered = [[] for _ in range(self.world_size)] if self.is_main else None
        for k in range(rounds):
            start, stop = chunks[k] if k < len(chunks) else (0, 0)
            parts = self.gather_object(results[start:stop])
            if self.is_main:
                for rank_records, part in zip(gathered, parts):
                    rank_records += part
            del parts
        if not self.is_main:
            return []
        return merge_rank_results(gathered)

    def _reduce(self, values, op):
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._device())
        torch_dist.all_reduce(t, op=op)
        return t.cpu().tolist()

    def all_reduce_mean(self, value):
        """The mean of a number over ranks (a float; the number itself in a world of one)."""
        if not self.enabled:
            return float(value)
        return self._reduce([value], torch_dist.ReduceOp.SUM)[0] / self.world_size

    def all_reduce_mean_dict(self, values):
        """``{name: mean over ranks}`` in one collective, e.g. the loss terms for a log line.

        Keys are sorted so every rank packs the tensor the same way; all ranks must pass the
        same keys.
        """
        keys = sorted(values)
        plain = [float(values[k].detach()) if isinstance(values[k], torch.Tensor) else float(values[k]) for k in keys]
        if not self.enabled:
            return dict(zip(keys, plain))
        sums = self._reduce(plain, torch_dist.ReduceOp.SUM)
        return {k: s / self.world_size for k, s in zip(keys, sums)}

    def all_reduce_max(self, value):
        """The maximum over ranks, e.g. an "a stop signal arrived here" flag all ranks agree on."""
        if not self.enabled:
            return float(value)
        return self._reduce([value], torch_dist.ReduceOp.MAX)[0]


def plan_chunks(n_records, chunk_records):
    """``[(start, stop), ...]`` slicing ``n_records`` into runs of at most ``chunk_records``
    (one run for ``None``; none for no records)."""
    if chunk_records is None:
        return [(0, n_records)] if n_records else []
    if int(chunk_records) < 1:
        raise ValueError(f"chunk_records must be at least 1, got {chunk_records}")
    step = int(chunk_records)
    return [(start, min(start + step, n_records)) for start in range(0, n_records, step)]


def merge_rank_results(gathered):
    """One list from the ranks' record lists (rank order), as a single process would see it."""
    records = [rec for part in gathered for rec in part]
    if all(isinstance(rec, dict) and "index" in rec for rec in records):
        seen, merged = set(), []
        for rec in records:  # the first copy in rank order wins
            key = _index_key(rec["index"])
            if key not in seen:
                seen.add(key)
                merged.append(rec)
        merged.sort(key=lambda r: _index_key(r["index"]))
        return merged
    merged = []
    for i in range(max((len(p) for p in gathered), default=0)):
        merged += [part[i] for part in gathered if i < len(part)]
    return merged


def _index_key(index):
    if isinstance(index, torch.Tensor):
        index = index.item() if index.numel() == 1 else tuple(index.tolist())
    return index
