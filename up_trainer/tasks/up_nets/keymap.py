"""UP parameter names -> ours, per mapped backbone, so UP-trained checkpoints and UP's
``pretrain_model`` files load (through the tolerant loader, which reports what did not fit).

Names are rewritten by ordered regular expressions over the part of a key after the
backbone's entry name; keys that match no rule keep their name (UP's head and our head share
``classifier``). Buffers torchvision recomputes (Swin's relative position index and shift
masks) and UP's outputs we do not build (Swin's norm0-2) simply find no counterpart.
"""
import re

_RESNET = [(r"^layer0\.0\.", "conv1."), (r"^layer0\.1\.", "bn1.")]
_MOBILENETV2 = [  # UP's block: conv.{0,1} expand, {3,4} depthwise, {6,7} project
    (r"^features\.(0|18)\.(\d)\.", r"features.\1.\2."),
    (r"^(features\.\d+)\.conv\.0\.", r"\1.conv.0.0."), (r"^(features\.\d+)\.conv\.1\.", r"\1.conv.0.1."),
    (r"^(features\.\d+)\.conv\.3\.", r"\1.conv.1.0."), (r"^(features\.\d+)\.conv\.4\.", r"\1.conv.1.1."),
    (r"^(features\.\d+)\.conv\.6\.", r"\1.conv.2."), (r"^(features\.\d+)\.conv\.7\.", r"\1.conv.3."),
]
_REGNET = [
    (r"^stem\.conv\.", "stem.0."), (r"^stem\.bn\.", "stem.1."),
    (r"^(s\d)\.b(\d+)\.", lambda m: f"{m[1]}.block{m[1][1:]}-{int(m[2]) - 1}."),
    (r"^(s\d\.block\d-\d+)\.proj\.", r"\1.proj.0."), (r"^(s\d\.block\d-\d+)\.bn\.", r"\1.proj.1."),
    (r"\.f\.(a|b|c)\.", r".f.\1.0."), (r"\.f\.(a|b|c)_bn\.", r".f.\1.1."),
    (r"\.f\.se\.f_ex\.0\.", ".f.se.fc1."), (r"\.f\.se\.f_ex\.2\.", ".f.se.fc2."),
]
_SWIN = [
    (r"^patch_embed\.proj\.", "features.0.0."), (r"^patch_embed\.norm\.", "features.0.2."),
    (r"^layers\.(\d+)\.blocks\.(\d+)\.", lambda m: f"features.{2 * int(m[1]) + 1}.{m[2]}."),
    (r"^layers\.(\d+)\.downsample\.", lambda m: f"features.{2 * int(m[1]) + 2}."),
    (r"\.mlp\.fc1\.", ".mlp.0."), (r"\.mlp\.fc2\.", ".mlp.3."), (r"^norm3\.", "norm."),
]
_VIT = [
    (r"^layers\.encoder_(\d+)\.", r"encoder.layers.encoder_layer_\1."),
    (r"\.norm1\.", ".ln_1."), (r"\.norm2\.", ".ln_2."),
    (r"\.attention\.to_qkv\.weight$", ".self_attention.in_proj_weight"),
    (r"\.attention\.to_qkv\.bias$", ".self_attention.in_proj_bias"),
    (r"\.attention\.to_out\.", ".self_attention.out_proj."),
    (r"\.feedforward\.mlp1\.", ".mlp.0."), (r"\.feedforward\.mlp2\.", ".mlp.3."),
    (r"^embedding\.", "conv_proj."), (r"^cls_token$", "class_token"), (r"^pos_embedding$", "encoder.pos_embedding"),
    (r"^encoder_norm\.", "encoder.ln."),
]
_CONVNEXT = [  # UP: downsample_layers.i (stem / LN + conv), stages.i.j.{dwconv, norm, pwconv1, pwconv2, gamma}
    (r"^downsample_layers\.(\d)\.", lambda m: f"features.{2 * int(m[1])}."),
    (r"^stages\.(\d)\.(\d+)\.", lambda m: f"features.{2 * int(m[1]) + 1}.{m[2]}."),
    (r"\.dwconv\.", ".block.0."), (r"\.norm\.", ".block.2."), (r"\.pwconv1\.", ".block.3."),
    (r"\.pwconv2\.", ".block.5."), (r"\.gamma$", ".layer_scale"),  # C -> C x 1 x 1: convnext.reshape_layer_scales
]
# UP's mobilenetv3 and CSWin are built with UP's own module names: nothing to rename.
RULES = {"resnet": _RESNET, "mobilenetv2": _MOBILENETV2, "regnet": _REGNET, "swin": _SWIN, "vit": _VIT,
         "mobilenetv3": [], "convnext": _CONVNEXT, "CSWin": []}
# A name only UP's layout has: a file holding one is UP-named (UP's and our names overlap, e.g.
# MobileNetV2's ``features.1.conv.3``, so names are never translated one by one).
SIGNATURES = {"resnet": r"^layer0\.", "mobilenetv2": r"^features\.\d+\.conv\.6\.", "regnet": r"^stem\.conv\.",
              "swin": r"^(patch_embed|layers)\.", "vit": r"^(embedding\.|cls_token$|layers\.encoder_)",
              "mobilenetv3": r"$^", "convnext": r"^(downsample_layers|stages)\.", "CSWin": r"$^"}


def family(backbone_type):
    for prefix in ("resnet", "mobilenetv2", "mobilenetv3", "regnet", "swin", "convnext", "CSWin"):
        if backbone_type.startswith(prefix):
            return prefix
    if backbone_type.startswith(("vit_", "deit_")):
        return "vit"
    raise KeyError(backbone_type)


def rename(key, rules):
    for pattern, repl in rules:
        key = re.sub(pattern, repl, key)
    return key


def fpn_rules(start, n_in, n_extra):
    """UP's FPN: c{level}_lateral and p{level}_conv per backbone level, p{level}_conv for the
    stride-2 convs above them, p{level}_pool for the max-pools (downsample: pool; no weights,
    the name is for module paths) (level = start_level + index)."""
    rules = []
    for i in range(n_in):  # with UP's normalize: {conv, bn|gn} inside each; torchvision's Sequential(conv, norm)
        for up, ours in ((f"c{start + i}_lateral", f"inner_blocks.{i}"), (f"p{start + i}_conv", f"layer_blocks.{i}")):
            rules += [(rf"^{up}\.conv\.", f"{ours}.0."), (rf"^{up}\.(bn|gn)\.", f"{ours}.1."),
                      (rf"^{up}\.", f"{ours}.0.")]
    for j in range(n_extra):
        rules.append((rf"^p{start + n_in + j}_conv\.", f"extra_blocks.convs.{j}."))
        rules.append((rf"^p{start + n_in + j}_pool\.", f"extra_blocks.pools.{j}."))
    return r"^c\d+_lateral\.", rules


RETINA_HEAD = (r"^cls_subnet\.", [
    (r"^cls_subnet\.(\d+)\.", lambda m: f"classification_head.conv.{int(m[1]) // 2}.0."),
    (r"^box_subnet\.(\d+)\.", lambda m: f"regression_head.conv.{int(m[1]) // 2}.0."),
    (r"^cls_subnet_pred\.", "classification_head.cls_logits."), (r"^box_subnet_pred\.", "regression_head.bbox_reg."),
])
RPN_HEAD = (r"^conv3x3\.", [(r"^conv3x3\.", "head.conv.0.0."), (r"^conv_cls\.", "head.cls_logits."),
                           (r"^conv_loc\.", "head.bbox_pred.")])
BOX_HEAD = (r"^fc6\.", [(r"^fc(6|7)\.", r"box_head.fc\1."), (r"^fc_rcnn_cls\.", "box_predictor.cls_score."),
                        (r"^fc_rcnn_loc\.", "box_predictor.bbox_pred.")])


def backbone_rules(backbone_type):
    fam = family(backbone_type)
    return SIGNATURES[fam], RULES[fam]


def module_path(name, parts):
    """Our dotted module path for UP's ``name`` (``neck.p2_conv`` -> ``neck.layer_blocks.0.0``)
    by the same rules as the parameter names, or None when no rule renames it."""
    part, _, rest = name.partition(".")
    if part not in parts or not rest:
        return None
    out = f"{part}.{rename(rest + '.', parts[part][1])}".rstrip(".")
    return out if out != name else None


def translate(state, parts):
    """``state`` with UP names rewritten to ours. ``parts``: {entry name: (signature, rules)}
    for the parts whose inner names differ. A part is rewritten only when the file holds a
    name matching its signature, one only UP's layout has, so our own checkpoints and
    torchvision-named files pass unchanged."""
    todo = {}
    for name, (signature, rules) in parts.items():
        inner = [k[len(name) + 1:] for k in state if k.startswith(name + ".")]
        if any(re.match(signature, k) for k in inner):
            todo[name] = rules
    out = {}
    for key, value in state.items():
        name, _, rest = key.partition(".")
        out[f"{name}.{rename(rest, todo[name])}" if name in todo else key] = value
    return out


def entry_prefixes(state, names):
    """UP-named weights of a net whose backbone, neck and head keep UP's module names inside
    (YOLOv5, YOLOv6): only each entry's name (``names``: UP's first three) becomes the
    model's part (backbone, neck, roi_head)."""
    prefixes = {f"{up}.": f"{own}." for up, own in zip(names, ("backbone", "neck", "roi_head")) if up != own}
    return {next((prefixes[p] + k[len(p):] for p in prefixes if k.startswith(p)), k): v for k, v in state.items()}
