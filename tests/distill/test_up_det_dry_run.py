"""UP's five Faster R-CNN distiller files train (``up train --dry-run``: two iterations, two
evaluation batches) on a few digit scenes, with only data paths, image size, the teachers'
weight files (none: random teachers) and the warm-up (off, so every mimic loss counts from the
first step) changed by --opts: R-152 teachers beside the R-50 student, each job type's losses
in the log."""
import os

import pytest
import yaml

from conftest import UP_FIXTURES, invoke

DET_DIR = os.path.join(UP_FIXTURES, "distiller", "det", "faster_rcnn")
# file -> the loss names its step logs
LOSSES = {
    "faster_rcnn_r152_50_1x_feature_mimic.yaml": ["mimic.mimic_job0.teacher.loss"],
    "faster_rcnn_r152_50_1x_sample_feature_mimic.yaml": ["mimic.mimic_job0.teacher.feature_loss"],
    "faster_rcnn_r152_50_1x_decouple_feature_mimic.yaml": ["mimic.mimic_job0.teacher.backbone_loss",
                                                           "mimic.mimic_job0.teacher.neck_fg_loss",
                                                           "mimic.mimic_job0.teacher.neck_bg_loss"],
    "faster_rcnn_r152_50_1x_frs.yaml": ["mimic.mimic_job0.teacher.neck_loss", "mimic.mimic_job0.teacher.pred_loss"],
    "faster_rcnn_r152_50_1x_multi_jobs_multi_teacheres.yaml": [
        "mimic.mimic_job0.teacher0.neck_loss", "mimic.mimic_job0.teacher0.pred_loss",
        "mimic.mimic_job1.teacher1.loss", "mimic.mimic_job1.teacher2.loss"],
}


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    from up_trainer.tasks.det.export import export_digits_coco

    return export_digits_coco(str(tmp_path_factory.mktemp("scenes")), num_images=4, num_val_images=2, seed=0)


def data_opts(scenes):
    opts = []
    for split, pre, resize in (("train", "dataset.train.dataset.kwargs", 1), ("val", "dataset.test.dataset.kwargs", 0)):
        ann, images = scenes[split]
        opts += [f"{pre}.meta_file={ann}", f"{pre}.image_reader.kwargs.image_dir={images}",
                 f"{pre}.transformer.{resize}.kwargs.scales=[64]", f"{pre}.transformer.{resize}.kwargs.max_size=96"]
    return opts + [f"{pre}.evaluator.kwargs.gt_file={scenes['val'][0]}"]


def mimic_opts(path):
    """Random teachers and no warm-up, for every job of the file."""
    with open(path) as f:
        mimic = yaml.safe_load(f)["mimic"]
    jobs = {k: v for k, v in mimic.items() if k.startswith("mimic_job")} or {None: mimic}
    opts = []
    for name, job in jobs.items():
        pre = "mimic" if name is None else f"mimic.{name}"
        opts.append(f"{pre}.warm_up_iters=-1")
        opts += [f"{pre}.{key}.teacher_weight=null" for key in job if "teacher" in key]
    return opts


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_ups_faster_rcnn_distiller_file_dry_runs(tmp_path, scenes, name):
    path = os.path.join(DET_DIR, name)
    res = invoke(["train", "--config", path, "--dry-run", "--device", "cpu", "--work-dir", tmp_path / "run",
                  "--opts", *data_opts(scenes), *mimic_opts(path)])
    assert res.exit_code == 0, (res.stderr, res.exception, res.stdout[-3000:])
    assert "dry run: ok" in res.stdout
    steps = [line for line in res.stdout.splitlines() if "dry run: train iteration" in line]
    assert len(steps) == 2
    for loss in LOSSES[name]:
        value = float(steps[-1].split(f"'{loss}': ")[1].split(",")[0].split("}")[0])
        assert value > 0, (loss, steps[-1])
