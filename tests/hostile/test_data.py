"""Data that does not fit the config, or is hostile itself: refused in one line (exit 2)
before or as the data is built, with nothing already saved lost."""
import os

from conftest import REPO, invoke
from hostile_helpers import assert_one_line, copy_run, fingerprint, trained_run  # noqa: F401

DIGITS_CLS = os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")
DIGITS_DET = os.path.join(REPO, "configs", "det", "digits_fcos.yaml")


def test_cls_net_with_fewer_classes_than_the_data(tmp_path, trained_run):  # noqa: F811
    save_dir = copy_run(trained_run, tmp_path)
    before = fingerprint(save_dir)
    result = invoke(["train", "--config", DIGITS_CLS, "--work-dir", tmp_path, "--opts", "net.kwargs.num_classes=5",
                     "dataset.train.kwargs.subset=16", "dataset.test.kwargs.subset=16"])
    assert_one_line(result, "net.kwargs.num_classes: the net predicts 5 classes but dataset.train has 10",
                    "set net.kwargs.num_classes: 10")
    assert fingerprint(save_dir) == before


def test_det_net_with_fewer_classes_than_the_data(tmp_path):
    result = invoke(["train", "--config", DIGITS_DET, "--work-dir", tmp_path, "--opts", "net.kwargs.num_classes=3",
                     "dataset.train.kwargs.num_images=2", "dataset.test.kwargs.num_images=2"])
    assert_one_line(result, "net.kwargs.num_classes: the net predicts 3 classes but dataset.train has 10")
    assert fingerprint(tmp_path / "checkpoints") == {}
