"""UP net types that are not mapped onto torchvision: each is refused in one line that says
what the type is in UP and what to use instead (exit 2), never silently approximated."""
from ...errors import ConfigError, join_path

_RETINA = "the UP RetinaNet form (RetinaSubNet + retina_post) or net: {type: retinanet}"
_CLS = "the UP form with resnet18/34/50/101, mobilenetv2, regnetx/y_200m/400m, swin_*, convnext_* or CSWin_*"

# type -> (what it is in UP, what we offer instead)
REFUSED = {
    # -- classification backbones / heads ----------------------------------------------------
    "base_ssl_postprocess": ("self-supervised loss post-process", "the ssl net entry it follows (docs/ssl.rst)"),
    # -- detection ----------------------------------------------------------------------------
    "CondinstHead": ("CondInst instance-mask head", "no instance segmentation: boxes only"),
    "condinst_post": ("CondInst mask loss and post-process", "no instance segmentation: boxes only"),
    "xmnet": ("XMNet backbone", "resnet18 (UP form)"),
    "xmnet_search": ("XMNet backbone decoded from a searched cell code (MBConv / fused-conv stages; the "
                     "search itself ran in UP's tooling)", "resnet18 (UP form)"),
    "ADAP": ("distillation feature adapter (a net part feeding UP's FRS and DeFeat mimic jobs)",
             "runtime.runner: kd reads it as a distill.adapt part (docs/distill.rst)"),
}
for _prefix, _what in (("big_", "BigNAS super-network part"), ("bignas_", "BigNAS sub-network part"),
                       ("BigRetina", "BigNAS RetinaNet head"), ("BignasRetina", "BigNAS RetinaNet head")):
    REFUSED[_prefix] = (_what, "the plain UP part it was searched from")


MAPPED_BIGNAS = ("bignas_resnet_basic", "bignas_fpn", "BignasRetinaHeadWithBN",  # a fixed subnet and
                 "big_resnet_basic", "big_fpn", "BigRetinaHeadWithBN",  # the supernet: bignas_net.py
                 "big_regnet", "BigClsHead")  # the RegNet classification supernet: bignas_regnet.py


def refusal(mtype):
    """(what, instead) for a refused UP type, or None."""
    if not isinstance(mtype, str) or mtype in MAPPED_BIGNAS:
        return None
    if mtype in REFUSED:
        return REFUSED[mtype]
    for prefix in ("big_", "bignas_", "BigRetina", "BignasRetina"):
        if mtype.startswith(prefix):
            return REFUSED[prefix]
    return None


def refuse(mtype, path):
    """Raise the one-line refusal for a UP type we do not map."""
    what, instead = refusal(mtype)
    raise ConfigError(join_path(path, "type"), f"{mtype} is UP's {what}, which up-trainer does not map "
                      "onto torchvision", f"instead: {instead}")
