"""UP's backbones as the encoders of the pretraining nets (tasks/ssl): every type of
:data:`.backbones.BACKBONES` with its UP kwargs, plus UP's MoCo v3 ViTs ``moco_vit_small`` /
``moco_vit_base``, registered in ``SSL_BACKBONES``. The trunk is built by the code that builds a
classifier's backbone, so its parameter names are a classifier's ``backbone.*`` names.

``moco_vit_*`` are the DeiT-S / ViT-B trunks with MoCo v3's choices: 12 heads, no dropout, a
fixed 2-D sine-cosine position embedding and ``stop_grad_conv1`` (the random patch projection
stays as built).
"""
import torch

from ...registry import SSL_BACKBONES
from ..ssl.encoder import Encoder, sincos_position_embedding
from .backbones import BACKBONES, build_backbone
from .options import Options
from .vit import ViTTrunk

# UP's MoCo v3 ViTs: the classifier type whose trunk they are, and their head count
MOCO_VITS = {"moco_vit_small": ("deit_small_patch16_224", 12), "moco_vit_base": ("vit_base_patch16_224", 12)}


def _up_backbone(mtype):
    def build(kwargs, path):
        trunk, sync = build_backbone(mtype, Options(kwargs, path, mtype))
        return Encoder(trunk, trunk.out_planes[-1], sync, isinstance(trunk, ViTTrunk))

    build.__name__ = build.__qualname__ = mtype
    return build


def _moco_vit(mtype):
    def build(kwargs, path):
        opts = Options(kwargs, path, mtype)
        arch, heads = MOCO_VITS[mtype]
        stop_grad = opts.take("stop_grad_conv1", False, types=bool)
        image_size = opts.take("image_size", opts.take("img_size", 224, types=int), types=int)
        drop_path = opts.take("drop_path_rate", 0.0, types=float)
        opts.done()
        inner = Options({"image_size": image_size, "heads": heads, "dropout": 0.0, "attention_dropout": 0.0,
                         "drop_path": drop_path}, path, mtype)
        trunk, _ = build_backbone(arch, inner)
        pos = trunk.encoder.pos_embedding
        with torch.no_grad():
            pos.copy_(sincos_position_embedding(image_size // trunk.patch_size, pos.shape[-1], class_token=True))
        pos.requires_grad_(False)
        if stop_grad:  # MoCo v3's remedy for instability
            trunk.conv_proj.requires_grad_(False)
        return Encoder(trunk, trunk.out_planes[-1], None, True)

    build.__name__ = build.__qualname__ = mtype
    return build


for _type in BACKBONES:
    SSL_BACKBONES.register(_type)(_up_backbone(_type))
for _type in MOCO_VITS:
    SSL_BACKBONES.register(_type)(_moco_vit(_type))
