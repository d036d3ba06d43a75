"""Where training stands; everything needed to continue at the exact next iteration."""
from dataclasses import asdict, dataclass, field


@dataclass
class TrainState:
    epoch: int = 0  # 1-based epoch in progress, or the last one finished (0 before training)
    epoch_done: bool = True  # end-of-epoch work (after_epoch, eval, saves) of `epoch` is done
    epoch_iter: int = 0  # batches finished in `epoch`
    iter: int = 0  # global iterations finished
    epoch_len: int = 0  # batches per epoch on this rank
    metrics: dict = field(default_factory=dict)  # last evaluation

    def next_epoch(self):
        self.epoch += 1
        self.epoch_iter = 0
        self.epoch_done = False

    def state_dict(self):
        return {k: v for k, v in asdict(self).items() if k != "epoch_len"}

    def load_state_dict(self, d):
        for k in ("epoch", "epoch_done", "epoch_iter", "iter", "metrics"):
            if k in d:
                setattr(self, k, d[k])
