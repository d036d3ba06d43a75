"""The pretraining ``net`` types (docs/ssl.rst): ``moco``, ``moco_v3``, ``simclr``, ``simsiam``
and ``mae``, each ``{type, kwargs: {backbone: {type, kwargs}, ...}}``. UP's ``ssl`` net entries
are translated onto these (config/up_ssl.py)."""
from ...errors import ConfigError
from ...registry import MODELS
from .contrastive import MoCo, MoCoV3, SimCLR, SimSiam
from .encoder import check_positive, check_unit
from .mae import MAE


def _temperature(value, key="temperature"):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(key, f"expected a number > 0, got {value!r}")
    return float(value)


@MODELS.register("moco")
def moco(backbone: dict, dim: int = 128, queue_size: int = 65536, momentum: float = 0.999,
         temperature: float = 0.07, mlp: bool = False):
    """MoCo v1 / v2 (mlp: true): momentum encoder, a queue of queue_size negative keys."""
    return MoCo(backbone, check_positive(dim, "dim"), check_positive(queue_size, "queue_size"),
                check_unit(momentum, "momentum"), _temperature(temperature), mlp)


@MODELS.register("moco_v3")
def moco_v3(backbone: dict, dim: int = 256, mlp_dim: int = 4096, momentum: float = 0.999,
            temperature: float = 1.0):
    """MoCo v3: momentum encoder, projector and predictor MLPs, in-batch negatives."""
    return MoCoV3(backbone, check_positive(dim, "dim"), check_positive(mlp_dim, "mlp_dim"),
                  check_unit(momentum, "momentum"), _temperature(temperature))


@MODELS.register("simclr")
def simclr(backbone: dict, projector_layers: int = 2, hidden_dim: int = 0, dim: int = 128,
           temperature: float = 0.07):
    """SimCLR: NT-Xent over the batch's 2N views; projector_layers linear layers (0: none)."""
    if isinstance(projector_layers, bool) or projector_layers < 0:
        raise ConfigError("projector_layers", f"expected an integer >= 0, got {projector_layers!r}")
    if hidden_dim:
        check_positive(hidden_dim, "hidden_dim")
    return SimCLR(backbone, projector_layers, hidden_dim or None, check_positive(dim, "dim"), _temperature(temperature))


@MODELS.register("simsiam")
def simsiam(backbone: dict, dim: int = 2048, pred_dim: int = 512):
    """SimSiam: projector, predictor and stop-gradient; no negatives."""
    return SimSiam(backbone, check_positive(dim, "dim"), check_positive(pred_dim, "pred_dim"))


@MODELS.register("mae")
def mae(backbone: dict, mask_ratio: float = 0.75, decoder_dim: int = 512, decoder_depth: int = 8,
        decoder_heads: int = 16, norm_pix_loss: bool = False):
    """MAE on a vit_* backbone: random masking, a transformer decoder, pixel loss on masked patches."""
    check_unit(mask_ratio, "mask_ratio", low_open=True)
    for key, value in (("decoder_dim", decoder_dim), ("decoder_depth", decoder_depth), ("decoder_heads", decoder_heads)):
        check_positive(value, key)
    if decoder_dim % decoder_heads:
        raise ConfigError("decoder_heads", f"{decoder_heads} heads do not divide decoder_dim {decoder_dim}")
    return MAE(backbone, mask_ratio, decoder_dim, decoder_depth, decoder_heads, norm_pix_loss)
