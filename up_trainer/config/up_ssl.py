"""UP's self-supervised net (``type: ssl`` with ``multi_model`` encoders and one of UP's
``wrappers``, then ``base_ssl_postprocess`` with an ``ssl_loss``) translated into the native
pretraining net types of up_trainer/tasks/ssl (docs/ssl.rst):

=====================  ======================  =========================================
UP wrapper             UP ssl_loss             native net
=====================  ======================  =========================================
moco (mlp: false/true) moco_loss               moco (MoCo v1 / v2): K -> queue_size, m ->
                                               momentum, T -> temperature
moco_vit               contrastive_loss (tau)  moco_v3: tau -> temperature (T must equal it)
simclr                 simclr_loss             simclr: num_mlp_layer -> projector_layers
                                               (0 with mlp: false), dim -> hidden_dim,
                                               output_dim -> dim
simsiam                simsiam_loss            simsiam: dim, pred_dim
MAE                    mae_loss                mae: the mae_vit_* type -> a vit_* backbone and
                                               its decoder size; mask_ratio, norm_pix_loss
=====================  ======================  =========================================

Every UP key is honoured, recorded in a note, or refused in one line naming it. No torch
import here.
"""
from ..errors import ConfigError, did_you_mean, join_path

WRAPPER_LOSS = {"moco": "moco_loss", "moco_vit": "contrastive_loss", "simclr": "simclr_loss",
                "simsiam": "simsiam_loss", "MAE": "mae_loss"}
# UP's MAE models: (the ViT classifier type of the encoder, decoder width, depth, heads)
MAE_TYPES = {"mae_vit_base_patch16_dec512d8b": ("vit_base_patch16_224", 512, 8, 16),
             "mae_vit_base_patch16_dec512d2b": ("vit_base_patch16_224", 512, 2, 16),
             "mae_vit_large_patch16_dec512d8b": ("vit_large_patch16_224", 512, 8, 16),
             "mae_vit_huge_patch14_dec512d8b": ("vit_huge_patch14_224", 512, 8, 16)}
MAE_TYPES.update({"mae_vit_base_patch16": MAE_TYPES["mae_vit_base_patch16_dec512d8b"],
                  "mae_vit_large_patch16": MAE_TYPES["mae_vit_large_patch16_dec512d8b"],
                  "mae_vit_huge_patch14": MAE_TYPES["mae_vit_huge_patch14_dec512d8b"]})


class _Kwargs:
    """One UP kwargs mapping read key by key; ``done`` refuses what nobody read."""

    def __init__(self, kwargs, path):
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise ConfigError(path, f"expected a mapping, got {type(kwargs).__name__}")
        self.kwargs, self.path, self.read = dict(kwargs), path, []

    def take(self, key, default, kinds=None):
        self.read.append(key)
        value = self.kwargs.pop(key, default)
        if kinds is not None and not (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)):
            raise ConfigError(join_path(self.path, key), f"expected {'/'.join(k.__name__ for k in kinds)}, got {value!r}")
        return value

    def done(self):
        for key in self.kwargs:
            raise ConfigError(join_path(self.path, key), "unknown argument",
                              did_you_mean(key, self.read) or f"accepted: {', '.join(self.read) or 'none'}")


NUMBER = (int, float)


def is_up_ssl_net(net):
    return isinstance(net, list) and any(isinstance(e, dict) and e.get("type") == "ssl" for e in net)


def translate_ssl(cfg, notes):
    """Rewrite a UP ``ssl`` net list into the native pretraining net (in place)."""
    net = cfg.get("net")
    if not is_up_ssl_net(net):
        return
    index = next(i for i, e in enumerate(net) if isinstance(e, dict) and e.get("type") == "ssl")
    path = join_path("net", index)
    entry = net[index]
    if index != 0 or len(net) != 2 or not isinstance(net[1], dict) or net[1].get("type") != "base_ssl_postprocess":
        raise ConfigError("net", "UP's ssl net is [{type: ssl, multi_model, wrappers}, {type: base_ssl_postprocess}]",
                          "give exactly these two entries")
    for key in entry:
        if key not in ("name", "type", "multi_model", "wrappers", "kwargs"):
            raise ConfigError(join_path(path, key), "unknown key", "UP's ssl entry has name, type, multi_model, wrappers")
    if entry.get("kwargs"):
        raise ConfigError(join_path(path, "kwargs"), "UP's ssl entry takes no kwargs", "its parts are multi_model")
    wrapper, wpath = _one_wrapper(entry.get("wrappers"), join_path(path, "wrappers"))
    models = entry.get("multi_model")
    mpath = join_path(path, "multi_model")
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
        raise ConfigError(mpath, "expected a list of {name, type, kwargs} encoders")
    kind = wrapper["type"]
    kw = _Kwargs(wrapper.get("kwargs"), join_path(wpath, "kwargs"))
    loss = _loss(net[1], kind, join_path("net", 1))
    native = {"moco": _moco, "moco_vit": _moco_v3, "simclr": _simclr, "simsiam": _simsiam, "MAE": _mae}[kind](
        models, mpath, kw, loss, notes)
    kw.done()
    cfg["net"] = native
    notes.append(f"net: UP's ssl net (wrapper {kind}, {loss['type']}) -> {{type: {native['type']}}} (docs/ssl.rst)")


def _one_wrapper(wrappers, path):
    if not isinstance(wrappers, list) or len(wrappers) != 1 or not isinstance(wrappers[0], dict):
        raise ConfigError(path, "expected one wrapper {type, kwargs}", f"one of {', '.join(WRAPPER_LOSS)}")
    kind = wrappers[0].get("type")
    if kind not in WRAPPER_LOSS:
        raise ConfigError(join_path(join_path(path, 0), "type"), f"UP's ssl wrapper {kind!r} is not mapped",
                          did_you_mean(str(kind), WRAPPER_LOSS) or f"mapped: {', '.join(WRAPPER_LOSS)}")
    return wrappers[0], join_path(path, 0)


def _loss(entry, kind, path):
    kw = _Kwargs(entry.get("kwargs"), join_path(path, "kwargs"))
    loss = kw.take("ssl_loss", None, (dict,))
    kw.take("prefix", None, (str, type(None)))  # the loss's log name only
    kw.done()
    lpath = join_path(path, "kwargs.ssl_loss")
    if loss is None or loss.get("type") != WRAPPER_LOSS[kind]:
        raise ConfigError(join_path(lpath, "type"), f"the {kind} wrapper is trained with {WRAPPER_LOSS[kind]}, got "
                          f"{None if loss is None else loss.get('type')!r}", f"use {WRAPPER_LOSS[kind]}")
    out = {"type": loss["type"]}
    inner = _Kwargs(loss.get("kwargs"), join_path(lpath, "kwargs"))
    weight = inner.take("loss_weight", 1.0, NUMBER)
    if weight != 1.0:
        raise ConfigError(join_path(lpath, "kwargs.loss_weight"), f"{weight}: a pretraining run has one loss",
                          "scale the learning rate instead")
    if loss["type"] == "contrastive_loss":
        out["tau"] = inner.take("tau", None, NUMBER)
        if out["tau"] is None:
            raise ConfigError(join_path(lpath, "kwargs.tau"), "required by UP's contrastive_loss")
    if loss["type"] == "mae_loss":
        out["norm_pix_loss"] = inner.take("norm_pix_loss", False, (bool,))
        if "norm_pix_loss" in loss:  # UP's file puts it beside type, where UP's builder never reads it
            if not isinstance(loss["norm_pix_loss"], bool):
                raise ConfigError(join_path(lpath, "norm_pix_loss"), f"expected true or false, got {loss['norm_pix_loss']!r}")
            out["beside_type"] = loss["norm_pix_loss"]
    inner.done()
    for key in loss:
        if key not in ("type", "kwargs", "norm_pix_loss"):
            raise ConfigError(join_path(lpath, key), "unknown key", "a loss is {type, kwargs}")
    return out


def _encoders(models, path, names, kind):
    """The backbone spec of the online encoder; a momentum encoder must be built alike."""
    if len(models) != len(names):
        raise ConfigError(path, f"UP's {kind} wrapper takes {len(names)} encoder(s) ({', '.join(names)}), got "
                          f"{len(models)}")
    specs = []
    for i, model in enumerate(models):
        for key in model:
            if key not in ("name", "type", "kwargs"):
                raise ConfigError(join_path(join_path(path, i), key), "unknown key", "an encoder is {name, type, kwargs}")
        if not isinstance(model.get("type"), str):
            raise ConfigError(join_path(join_path(path, i), "type"), "required string is missing")
        specs.append({"type": model["type"], "kwargs": dict(model.get("kwargs") or {})})
    if len(specs) == 2 and specs[0] != specs[1]:
        raise ConfigError(join_path(path, 1), "the momentum encoder is a copy of the online one",
                          f"give {names[1]} the type and kwargs of {names[0]}")
    return specs[0]


def _group_size(kw, notes, kind):
    if kw.take("group_size", 8, (int, type(None))) is not None:
        notes.append(f"net: UP's {kind} group_size (ShuffleBN across processes) is not applied: each process "
                     "normalizes its own keys' batch (docs/ssl.rst)")


def _planes(kw, keys, notes):
    for key in keys:
        if key in kw.kwargs:
            notes.append(f"net: UP's {key} {kw.kwargs[key]!r}: the heads read the backbone's width")
        kw.take(key, None, (int, type(None)))


def _moco(models, path, kw, loss, notes):
    backbone = _encoders(models, path, ("encoder_q", "encoder_k"), "moco")
    _planes(kw, ("q_plane", "k_plane"), notes)
    _group_size(kw, notes, "moco")
    return {"type": "moco", "kwargs": {"backbone": backbone, "dim": kw.take("dim", 128, (int,)),
                                       "queue_size": kw.take("K", 65536, (int,)), "momentum": kw.take("m", 0.999, NUMBER),
                                       "temperature": kw.take("T", 0.07, NUMBER), "mlp": kw.take("mlp", False, (bool,))}}


def _moco_v3(models, path, kw, loss, notes):
    backbone = _encoders(models, path, ("encoder_q", "encoder_k"), "moco_vit")
    temperature = kw.take("T", 1.0, NUMBER)
    if temperature != loss["tau"]:
        raise ConfigError(join_path(kw.path, "T"), f"{temperature} but contrastive_loss's tau is {loss['tau']}: MoCo v3 "
                          "has one temperature", "give T and tau the same value")
    _group_size(kw, notes, "moco_vit")
    return {"type": "moco_v3", "kwargs": {"backbone": backbone, "dim": kw.take("dim", 256, (int,)),
                                          "mlp_dim": kw.take("mlp_dim", 4096, (int,)),
                                          "momentum": kw.take("m", 0.999, NUMBER), "temperature": temperature}}


def _simclr(models, path, kw, loss, notes):
    backbone = _encoders(models, path, ("encoder",), "simclr")
    layers = kw.take("num_mlp_layer", 2, (int,)) if kw.take("mlp", True, (bool,)) else 0
    return {"type": "simclr", "kwargs": {"backbone": backbone, "projector_layers": layers,
                                         "hidden_dim": kw.take("dim", 2048, (int,)),
                                         "dim": kw.take("output_dim", 128, (int,)), "temperature": 0.07}}


def _simsiam(models, path, kw, loss, notes):
    backbone = _encoders(models, path, ("base_encoder",), "simsiam")
    _planes(kw, ("plane",), notes)
    norm = kw.take("normalize", {"type": "solo_bn"}, (dict,))
    if norm.get("type") not in ("solo_bn", "sync_bn") or set(norm) - {"type", "kwargs"}:
        raise ConfigError(join_path(kw.path, "normalize.type"), f"{norm.get('type')!r} is not mapped for the "
                          "SimSiam heads", "solo_bn or sync_bn (BatchNorm1d, synchronized with the backbone's under DDP)")
    return {"type": "simsiam", "kwargs": {"backbone": backbone, "dim": kw.take("dim", 2048, (int,)),
                                          "pred_dim": kw.take("pred_dim", 512, (int,))}}


def _mae(models, path, kw, loss, notes):
    if len(models) != 1:
        raise ConfigError(path, f"UP's MAE wrapper takes one model, got {len(models)}")
    model, mkpath = models[0], join_path(join_path(path, 0), "kwargs")
    if model.get("type") not in MAE_TYPES:
        raise ConfigError(join_path(join_path(path, 0), "type"), f"UP's MAE model {model.get('type')!r} is not mapped",
                          did_you_mean(str(model.get("type")), MAE_TYPES) or f"mapped: {', '.join(MAE_TYPES)}")
    vit, dec_dim, dec_depth, dec_heads = MAE_TYPES[model["type"]]
    mk = _Kwargs(model.get("kwargs"), mkpath)
    mask_ratio = mk.take("mask_ratio", 0.75, NUMBER)
    image_size = mk.take("img_size", 224, (int,))
    norm_pix = mk.take("norm_pix_loss", loss.get("norm_pix_loss", False), (bool,))
    mk.done()
    if "beside_type" in loss:
        notes.append(f"net[1].kwargs.ssl_loss.norm_pix_loss: {loss['beside_type']} beside type, where UP's loss builder "
                     f"never reads it; the pixel loss is {'normalized' if norm_pix else 'plain'} as UP trains it")
    backbone = {"type": vit, "kwargs": {"image_size": image_size, "dropout": 0.0, "attention_dropout": 0.0,
                                        "drop_path": 0.0}}
    return {"type": "mae", "kwargs": {"backbone": backbone, "mask_ratio": mask_ratio, "decoder_dim": dec_dim,
                                      "decoder_depth": dec_depth, "decoder_heads": dec_heads, "norm_pix_loss": norm_pix}}
