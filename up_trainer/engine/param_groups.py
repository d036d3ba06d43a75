"""Parameter groups for the optimizer.

Frozen parameters (requires_grad False) are left out. ``paramwise_cfg`` (MMEngine) /
``pconfig`` (UP) refinements are interpreted here.
"""
from ..errors import ConfigError


def build_param_groups(model, optimizer_kwargs, paramwise_cfg, path):
    params = [p for p in model.parameters() if p.requires_grad]
    if paramwise_cfg:
        raise ConfigError(path, "paramwise_cfg is not supported yet")
    return [{"params": params}]
