"""Process-group facts the trainer needs; a single process is a world of one."""
import torch
import torch.distributed as torch_dist


class DistInfo:
    def __init__(self):
        self.enabled = torch_dist.is_available() and torch_dist.is_initialized()
        self.rank = torch_dist.get_rank() if self.enabled else 0
        self.world_size = torch_dist.get_world_size() if self.enabled else 1

    @property
    def is_main(self):
        return self.rank == 0

    def barrier(self):
        if self.enabled:
            torch_dist.barrier()

    def broadcast_object(self, obj):
        if not self.enabled:
            return obj
        box = [obj]
        torch_dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_results(self, results):
        """Every rank's per-sample records on rank 0, each sample once (by its index)."""
        if not self.enabled:
            return results
        gathered = [None] * self.world_size if self.is_main else None
        torch_dist.gather_object(results, gathered, dst=0)
        if not self.is_main:
            return []
        seen, merged = set(), []
        for part in gathered:
            for rec in part:
                if rec["index"] not in seen:
                    seen.add(rec["index"])
                    merged.append(rec)
        merged.sort(key=lambda r: r["index"])
        return merged

    def all_reduce_mean(self, value):
        if not self.enabled:
            return value
        t = torch.tensor(float(value), dtype=torch.float64)
        torch_dist.all_reduce(t)
        return (t / self.world_size).item()
