"""MoCo v1/v2 (a momentum encoder and a queue of negative keys), MoCo v3 (a momentum encoder, a
predictor, in-batch negatives), SimCLR (NT-Xent over the other images of the batch) and SimSiam
(a predictor and a stop-gradient, no negatives), each on one backbone from :mod:`.encoder`.

Each model reads ``batch["image"]`` as N x 2 x C x H x W (two views, :mod:`.views`) and returns
``{"loss": ...}`` in training; the query / online encoder is the ``backbone`` child, which is
what a checkpoint hands on to a linear probe. The momentum copies (``backbone_momentum``,
``projector_momentum``) take no gradient: after each forward's update they move toward the
online weights by ``1 - momentum``, before the keys are computed, as in UP.
"""
import copy

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError, DataError
from .encoder import build_encoder, embed, mlp


def gather(tensor):
    """``tensor`` from every process, concatenated (itself when not distributed); no gradient."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def rank():
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def two_views(batch):
    image = batch["image"] if isinstance(batch, dict) else batch
    if image.dim() != 5 or image.shape[1] != 2:
        raise DataError(f"self-supervised pretraining reads two views per image (a batch N x 2 x C x H x W), got "
                        f"{tuple(image.shape)}: give the training data a two_views transform (or UP's torch_mocov2, "
                        "torch_simclrv1, ...)")
    return image[:, 0].contiguous(), image[:, 1].contiguous()


class _Pretrainer(nn.Module):
    """What every pretraining model shares: the backbone under ``backbone``, no evaluation."""

    def _encoder(self, spec):
        encoder = build_encoder(spec, "backbone")
        self.backbone = encoder.trunk
        self.sync_bn_group_size = encoder.sync_bn_group_size  # normalize: sync_bn (builder.wrap_ddp)
        self.backbone_is_vit = encoder.is_vit
        return encoder.width

    def _no_eval(self):
        raise ConfigError("dataset.test", "a self-supervised pretraining model has no predictions to evaluate",
                          "leave dataset.test out (or set trainer.is_eval: false); evaluate with a linear probe run "
                          "that loads the checkpoint (saver.pretrain_model)")

    def check_batch_size(self, batch_size, world_size):
        """Called before training with the per-process batch and the process count."""


class _Momentum:
    """A no-gradient copy of modules that follows them by exponential moving average."""

    @staticmethod
    def copy_of(module):
        twin = copy.deepcopy(module)
        twin.requires_grad_(False)
        return twin

    @torch.no_grad()
    def _momentum_update(self):
        for online, twin in self.momentum_pairs():
            for p, q in zip(online.parameters(), twin.parameters()):
                q.mul_(self.momentum).add_(p.detach(), alpha=1.0 - self.momentum)


class MoCo(_Momentum, _Pretrainer):
    """MoCo v1 (linear projection) / v2 (``mlp: true``: a 2-layer MLP): InfoNCE of each query
    against its key (the other view through the momentum encoder) and ``queue_size`` keys of
    earlier batches, at ``temperature``."""

    def __init__(self, backbone, dim=128, queue_size=65536, momentum=0.999, temperature=0.07, mlp_head=False):
        super().__init__()
        width = self._encoder(backbone)
        self.momentum, self.temperature, self.queue_size = momentum, temperature, queue_size
        self.projector = mlp([width, width, dim], bn=False) if mlp_head else nn.Sequential(nn.Linear(width, dim))
        self.backbone_momentum = self.copy_of(self.backbone)
        self.projector_momentum = self.copy_of(self.projector)
        self.register_buffer("queue", F.normalize(torch.randn(dim, queue_size), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    def momentum_pairs(self):
        return ((self.backbone, self.backbone_momentum), (self.projector, self.projector_momentum))

    def check_batch_size(self, batch_size, world_size):
        keys = batch_size * world_size
        if self.queue_size % keys:
            raise ConfigError("net.kwargs.queue_size", f"the queue of {self.queue_size} keys (UP's K) is not a multiple "
                              f"of the {keys} keys each step adds (batch {batch_size} x {world_size} processes)",
                              f"make it a multiple, e.g. {max(keys, self.queue_size // keys * keys)}, and set "
                              "dataset.drop_last: true")

    def forward(self, batch):
        if not self.training:
            self._no_eval()
        im_q, im_k = two_views(batch)
        q = F.normalize(self.projector(embed(self.backbone, im_q)), dim=1)
        with torch.no_grad():
            self._momentum_update()
            k = F.normalize(self.projector_momentum(embed(self.backbone_momentum, im_k)), dim=1)
        positive = (q * k).sum(dim=1, keepdim=True)
        negative = q @ self.queue.clone().detach()
        logits = torch.cat([positive, negative], dim=1) / self.temperature
        loss = F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long, device=q.device))
        self._enqueue(gather(k))
        return {"loss": loss}

    @torch.no_grad()
    def _enqueue(self, keys):
        ptr, n = int(self.queue_ptr), len(keys)
        if self.queue_size % n:
            raise DataError(f"a batch of {n} keys does not tile the queue of {self.queue_size}: a short last batch? "
                            "set dataset.drop_last: true")
        self.queue[:, ptr:ptr + n] = keys.t()
        self.queue_ptr[0] = (ptr + n) % self.queue_size


class MoCoV3(_Momentum, _Pretrainer):
    """MoCo v3: 3-layer projectors (online and momentum), a 2-layer predictor on the online
    side, and a symmetric InfoNCE against the other view's momentum keys of the whole batch
    (every process's), scaled by 2 x temperature as in MoCo v3 (UP's contrastive_loss tau)."""

    def __init__(self, backbone, dim=256, mlp_dim=4096, momentum=0.999, temperature=1.0):
        super().__init__()
        width = self._encoder(backbone)
        self.momentum, self.temperature = momentum, temperature
        self.projector = mlp([width, mlp_dim, mlp_dim, dim], bias=False, last_bn=True, affine_last=False)
        self.predictor = mlp([dim, mlp_dim, dim], bias=False, last_bn=True, affine_last=False)
        self.backbone_momentum = self.copy_of(self.backbone)
        self.projector_momentum = self.copy_of(self.projector)

    def momentum_pairs(self):
        return ((self.backbone, self.backbone_momentum), (self.projector, self.projector_momentum))

    def _infonce(self, q, k):
        q, k = F.normalize(q, dim=1), F.normalize(gather(k), dim=1)
        logits = q @ k.t() / self.temperature
        labels = torch.arange(len(q), device=q.device) + len(q) * rank()
        return F.cross_entropy(logits, labels) * 2 * self.temperature

    def forward(self, batch):
        if not self.training:
            self._no_eval()
        x1, x2 = two_views(batch)
        q1 = self.predictor(self.projector(embed(self.backbone, x1)))
        q2 = self.predictor(self.projector(embed(self.backbone, x2)))
        with torch.no_grad():
            self._momentum_update()
            k1 = self.projector_momentum(embed(self.backbone_momentum, x1))
            k2 = self.projector_momentum(embed(self.backbone_momentum, x2))
        return {"loss": self._infonce(q1, k2) + self._infonce(q2, k1)}


class SimCLR(_Pretrainer):
    """SimCLR's NT-Xent: each view's positive is the other view of its image, its negatives the
    2N - 2 other views of the batch, at ``temperature`` (UP: 0.07, fixed). As UP, the embedding
    is L2-normalized before the projector (``projector_layers`` linear layers, 0: none) and after."""

    def __init__(self, backbone, projector_layers=2, hidden_dim=None, dim=128, temperature=0.07):
        super().__init__()
        width = self._encoder(backbone)
        self.temperature = temperature
        hidden = hidden_dim or width
        sizes = [width] + [hidden] * (projector_layers - 1) + [dim] if projector_layers else []
        self.projector = mlp(sizes, bn=False) if projector_layers else nn.Identity()

    def forward(self, batch):
        if not self.training:
            self._no_eval()
        x1, x2 = two_views(batch)
        z = embed(self.backbone, torch.cat([x1, x2]))
        z = F.normalize(self.projector(F.normalize(z, dim=1)), dim=1)
        n = len(x1)
        sim = z @ z.t() / self.temperature
        sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
        target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
        return {"loss": F.cross_entropy(sim, target)}


class SimSiam(_Pretrainer):
    """SimSiam: a 3-layer projector (BatchNorm after each layer, the last without affine), a
    2-layer predictor (``pred_dim`` wide), and the negative cosine of each view's prediction
    with the other view's projection, which takes no gradient (the stop-grad)."""

    def __init__(self, backbone, dim=2048, pred_dim=512):
        super().__init__()
        width = self._encoder(backbone)
        self.projector = mlp([width, width, width, dim], bias=False, last_bn=True, affine_last=False)
        self.predictor = mlp([dim, pred_dim, dim], bias=False)
        self.predictor[-1] = nn.Linear(pred_dim, dim)  # the output layer keeps its bias (SimSiam)

    def forward(self, batch):
        if not self.training:
            self._no_eval()
        x1, x2 = two_views(batch)
        z1, z2 = self.projector(embed(self.backbone, x1)), self.projector(embed(self.backbone, x2))
        p1, p2 = self.predictor(z1), self.predictor(z2)
        loss = -(F.cosine_similarity(p1, z2.detach()).mean() + F.cosine_similarity(p2, z1.detach()).mean()) / 2
        return {"loss": loss}
