"""A plugin (runtime.imports) that registers a detector family's exporter under a name already
taken: one line naming both, exit 2, instead of a traceback."""
from hostile_helpers import assert_one_line, tiny_cfg, write_yaml

from conftest import invoke

PLUGIN = '''
from up_trainer.export.dense import YoloxDense
from up_trainer.registry import EXPORTERS


@EXPORTERS.register("yolox")  # the built-in YOLOX family's name
class MyYoloxDense(YoloxDense):
    pass
'''


def test_plugin_exporter_under_a_taken_family_name(tmp_path, monkeypatch):
    (tmp_path / "clashing_exporter_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    res = invoke(["config", "--config", cfg, "--opts", "runtime.imports=[clashing_exporter_plugin]"])
    assert_one_line(res, "runtime.imports[0]: module 'clashing_exporter_plugin': exporter 'yolox' is registered "
                    "twice: by up_trainer.export.dense.YoloxDense and by clashing_exporter_plugin.MyYoloxDense")


HOOK_PLUGIN = '''
from up_trainer.hooks import Hook
from up_trainer.registry import HOOKS


@HOOKS.register("shared_hook_name")
class {name}(Hook):
    pass
'''


def test_two_plugins_register_one_hook_name(tmp_path, monkeypatch):
    for name in ("FirstPluginHook", "SecondPluginHook"):
        (tmp_path / f"{name.lower()}_plugin.py").write_text(HOOK_PLUGIN.format(name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = write_yaml(tmp_path / "cfg.yaml", tiny_cfg())
    res = invoke(["config", "--config", cfg, "--opts",
                  "runtime.imports=[firstpluginhook_plugin,secondpluginhook_plugin]"])
    assert_one_line(res, "runtime.imports[1]: module 'secondpluginhook_plugin': hook 'shared_hook_name' is "
                    "registered twice: by firstpluginhook_plugin.FirstPluginHook and by "
                    "secondpluginhook_plugin.SecondPluginHook")
