"""MAE: a ViT encoder sees a random ``1 - mask_ratio`` of an image's patches; a light
transformer decoder fills the rest in from mask tokens, and the loss is the mean squared
pixel error on the masked patches only (``norm_pix_loss``: each target patch normalized by
its own mean and variance first).

The encoder is the classifier ViT trunk (tasks/up_nets/vit.py) under ``backbone``: its patch
projection, class token, position embedding and blocks keep the names a ``vit_*`` classifier
has, so a fine-tune or linear-probe run loads them from the checkpoint. As in MAE, both
position embeddings are fixed 2-D sine-cosine tables.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.vision_transformer import EncoderBlock

from ...errors import ConfigError, DataError
from .contrastive import _Pretrainer
from .encoder import sincos_position_embedding


class MAE(_Pretrainer):
    def __init__(self, backbone, mask_ratio=0.75, decoder_dim=512, decoder_depth=8, decoder_heads=16,
                 norm_pix_loss=False):
        super().__init__()
        width = self._encoder(backbone)
        trunk = self.backbone
        if not self.backbone_is_vit:
            raise ConfigError("backbone.type", "MAE masks the patches of a ViT", "use a vit_* backbone")
        self.mask_ratio, self.norm_pix_loss = mask_ratio, norm_pix_loss
        self.patch, self.grid = trunk.patch_size, trunk.image_size // trunk.patch_size
        channels = trunk.conv_proj.in_channels
        with torch.no_grad():
            trunk.encoder.pos_embedding.copy_(sincos_position_embedding(self.grid, width, class_token=True))
        trunk.encoder.pos_embedding.requires_grad_(False)
        self.decoder_embed = nn.Linear(width, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        self.register_buffer("decoder_pos", sincos_position_embedding(self.grid, decoder_dim, class_token=True))
        self.decoder_blocks = nn.Sequential(*[EncoderBlock(decoder_heads, decoder_dim, 4 * decoder_dim, 0.0, 0.0)
                                              for _ in range(decoder_depth)])
        self.decoder_norm = nn.LayerNorm(decoder_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_dim, self.patch ** 2 * channels)
        nn.init.normal_(self.mask_token, std=0.02)
        for m in [self.decoder_embed, self.decoder_pred, *self.decoder_blocks.modules()]:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def patchify(self, images):
        """N x C x H x W -> N x L x (p * p * C), patches in row-major order."""
        n, c, _, _ = images.shape
        p, g = self.patch, self.grid
        x = images.reshape(n, c, g, p, g, p)
        return torch.einsum("nchpwq->nhwpqc", x).reshape(n, g * g, p * p * c)

    def _encode(self, images):
        """The visible patches' tokens (class token first), the mask (1 = hidden) and the order
        that puts the shuffled patches back."""
        trunk = self.backbone
        if images.dim() != 4 or images.shape[-2:] != (trunk.image_size, trunk.image_size):
            raise DataError(f"MAE's ViT is built for {trunk.image_size} x {trunk.image_size} images (its position "
                            f"embedding), the batch is {tuple(images.shape)}: set the backbone's image_size to the "
                            "transforms' output size, one view per image")
        x = trunk.conv_proj(images).flatten(2).transpose(1, 2)
        pos = trunk.encoder.pos_embedding
        x = x + pos[:, 1:]
        n, length, _ = x.shape
        keep = max(1, int(length * (1 - self.mask_ratio)))
        noise = torch.rand(n, length, device=x.device)
        shuffle = noise.argsort(dim=1)
        restore = shuffle.argsort(dim=1)
        kept = shuffle[:, :keep]
        x = torch.gather(x, 1, kept.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        mask = torch.ones(n, length, device=x.device)
        mask[:, :keep] = 0
        mask = torch.gather(mask, 1, restore)
        token = (trunk.class_token + pos[:, :1]).expand(n, -1, -1)
        encoder = trunk.encoder
        x = encoder.ln(encoder.layers(encoder.dropout(torch.cat([token, x], dim=1))))
        return x, mask, restore

    def _decode(self, latent, restore):
        x = self.decoder_embed(latent)
        n, length = restore.shape
        fill = self.mask_token.expand(n, length + 1 - x.shape[1], -1)
        patches = torch.cat([x[:, 1:], fill], dim=1)
        patches = torch.gather(patches, 1, restore.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        x = torch.cat([x[:, :1], patches], dim=1) + self.decoder_pos
        x = self.decoder_norm(self.decoder_blocks(x))
        return self.decoder_pred(x[:, 1:])

    def forward(self, batch):
        if not self.training:
            self._no_eval()
        images = batch["image"] if isinstance(batch, dict) else batch
        latent, mask, restore = self._encode(images)
        pred = self._decode(latent, restore)
        target = self.patchify(images)
        if self.norm_pix_loss:
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6) ** 0.5
        per_patch = F.mse_loss(pred, target, reduction="none").mean(dim=-1)
        return {"loss": (per_patch * mask).sum() / mask.sum()}
