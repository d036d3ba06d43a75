"""One label map per run: a val split, `up eval` and `up predict` label every class as the train
set does, by name (COCO: by id and name); a class the run does not know is one line, exit 2.
And the names themselves: one check (non-empty, distinct, stripped) for every format."""
import copy
import json
import os
import re

import pytest

from conftest import invoke
from format_fixtures import det_cfg, digits_coco, write_voc, write_yolo
from hostile_helpers import assert_one_line, tiny_cfg, write_yaml


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("labelmaps"))
    return digits_coco(root, num_images=8, num_val_images=2)["train"]


def names_in(xml_path):
    return set(re.findall(r"<name>(.*?)</name>", open(xml_path).read()))


def metrics_of(work_dir):
    with open(os.path.join(work_dir, "results", "metrics.json")) as f:
        return json.load(f)


def with_results(cfg, work_dir):
    cfg = copy.deepcopy(cfg)
    cfg["saver"].update(save_result=True, results_dir=str(work_dir / "results"))
    return cfg


def test_voc_val_split_without_one_class_keeps_the_train_labels(digits, tmp_path):
    """VOC collects class names per split: a val split without any '0' used to number its
    classes from '1', so every val box was scored as another class (exit 0)."""
    coco, img_dir, _ = digits
    root = write_voc(coco, img_dir, str(tmp_path / "voc"), "train")
    ann = os.path.join(root, "Annotations")
    train_names = sorted(set().union(*(names_in(os.path.join(ann, f)) for f in os.listdir(ann))))
    first = train_names[0]
    val_ids = sorted(f[:-4] for f in os.listdir(ann) if first not in names_in(os.path.join(ann, f)))
    assert val_ids and len(val_ids) < len(os.listdir(ann))
    with open(os.path.join(root, "ImageSets", "Main", "val.txt"), "w") as f:
        f.write("".join(i + "\n" for i in val_ids))

    def split(name, classes=None):
        kwargs = {"root": root, "split": name, **({"classes": classes} if classes else {})}
        return {"type": "voc", "kwargs": kwargs}

    run = tmp_path / "run"
    cfg = with_results(det_cfg(split("train"), split("val"), epochs=2), run)
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run])
    assert result.exit_code == 0, result.stderr
    trained = metrics_of(run)
    assert f"bbox.AP.{first}" in trained  # the val set is scored with every train class
    ckpt = run / "checkpoints" / "ckpt_latest.pth"
    given = tmp_path / "given"
    declared = with_results(det_cfg(split("train", train_names), split("val", train_names)), given)
    result = invoke(["eval", "--config", write_yaml(tmp_path / "given.yaml", declared), "--checkpoint", ckpt,
                     "--work-dir", given])
    assert result.exit_code == 0, result.stderr
    assert metrics_of(given) == pytest.approx(trained)
    # up eval with a config holding the val split only: the checkpoint's label map, not the val's names
    alone = tmp_path / "alone"
    val_only = with_results(det_cfg(split("val"), split("val")), alone)
    del val_only["dataset"]["train"]
    result = invoke(["eval", "--config", write_yaml(tmp_path / "alone.yaml", val_only), "--checkpoint", ckpt,
                     "--work-dir", alone])
    assert result.exit_code == 0, result.stderr
    assert metrics_of(alone) == pytest.approx(trained)


def coco_without(coco, category_id):
    """The file minus one category, its annotations and the images holding them."""
    out = copy.deepcopy(coco)
    dropped = {a["image_id"] for a in out["annotations"] if a["category_id"] == category_id}
    out["categories"] = [c for c in out["categories"] if c["id"] != category_id]
    out["images"] = [i for i in out["images"] if i["id"] not in dropped]
    out["annotations"] = [a for a in out["annotations"] if a["image_id"] not in dropped]
    return out


def coco_entry(path, img_dir):
    return {"type": "coco", "kwargs": {"ann_file": str(path), "img_dir": img_dir}}


def test_coco_val_file_without_category_1_maps_by_id(digits, tmp_path):
    """COCO numbered labels by position in the file's categories: a val file without id 1
    shifted every label by one."""
    coco, img_dir, ann = digits
    val = coco_without(coco, 1)
    (tmp_path / "val.json").write_text(json.dumps(val))
    run = tmp_path / "run"
    cfg = with_results(det_cfg(coco_entry(ann, img_dir), coco_entry(tmp_path / "val.json", img_dir)), run)
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run])
    assert result.exit_code == 0, result.stderr
    ckpt = run / "checkpoints" / "ckpt_latest.pth"
    # the same images scored through the full file (every category declared): the same numbers
    full = dict(coco, images=val["images"], annotations=val["annotations"])
    (tmp_path / "full.json").write_text(json.dumps(full))
    other = tmp_path / "other"
    declared = with_results(det_cfg(coco_entry(ann, img_dir), coco_entry(tmp_path / "full.json", img_dir)), other)
    result = invoke(["eval", "--config", write_yaml(tmp_path / "full.yaml", declared), "--checkpoint", ckpt,
                     "--work-dir", other])
    assert result.exit_code == 0, result.stderr
    assert metrics_of(other) == pytest.approx(metrics_of(run))
    # one id under two names: refused in one line naming the id, both names and the file
    renamed = copy.deepcopy(val)
    renamed["categories"][0]["name"] = "other"
    (tmp_path / "renamed.json").write_text(json.dumps(renamed))
    cfg["dataset"]["test"] = coco_entry(tmp_path / "renamed.json", img_dir)
    result = invoke(["train", "--config", write_yaml(tmp_path / "bad.yaml", cfg), "--work-dir", tmp_path / "bad"])
    assert_one_line(result, "renamed.json", f"category id {val['categories'][0]['id']} is 'other' here")


def gray_images(folder, shades):
    """{name: shade}: 8x8 gray images of one flat shade each."""
    from PIL import Image

    folder.mkdir(exist_ok=True)
    for name, shade in shades.items():
        Image.new("L", (8, 8), shade).save(folder / name)


def csv_cfg(train_csv, test_csv, epochs=12):
    cfg = tiny_cfg(net={"type": "test_mlp", "kwargs": {"in_features": 192, "num_classes": 3}})  # 8x8 RGB
    cfg["trainer"].update(max_epoch=epochs, optimizer={"type": "AdamW", "kwargs": {"lr": 0.05}})
    cfg["dataset"].update(batch_size=6, test_batch_size=8)
    for split, path in (("train", train_csv), ("test", test_csv)):
        cfg["dataset"][split] = {"type": "csv", "kwargs": {"csv_file": str(path)}}
    return cfg


def test_csv_val_list_without_cat_scores_dog_as_dog(tmp_path):
    """CSV sorted the names of its own file: a val list without 'cat' made 'dog' label 1, the
    train set's 'cat'; four dog images scored 0 %."""
    shades = {"bird": 0, "cat": 128, "dog": 255}
    train = {f"{c}{k}.png": s for c, s in shades.items() for k in range(4)}
    gray_images(tmp_path / "img", train)
    (tmp_path / "train.csv").write_text("path,label\n" + "".join(f"img/{n},{n[:-5]}\n" for n in sorted(train)))
    (tmp_path / "val.csv").write_text("path,label\n" + "".join(f"img/dog{k}.png,dog\n" for k in range(4)))
    run = tmp_path / "run"
    cfg = with_results(csv_cfg(tmp_path / "train.csv", tmp_path / "val.csv"), run)
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", run])
    assert result.exit_code == 0, result.stderr
    with open(run / "results" / "results.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["label"] for r in rows] == [2, 2, 2, 2]  # 'dog' is class 2 of bird, cat, dog
    assert metrics_of(run)["top1"] == pytest.approx(100.0)
    # up predict names the classes by the checkpoint's label map, whatever the val list holds
    out = tmp_path / "pred"
    result = invoke(["predict", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--checkpoint",
                     run / "checkpoints" / "ckpt_latest.pth", "--input", tmp_path / "img" / "cat0.png",
                     "--out", out])
    assert result.exit_code == 0, result.stderr
    record = json.loads((out / "predictions.jsonl").read_text().splitlines()[0])
    assert (record["label"], record["class"]) == (1, "cat")
    # so does an exported model: its record holds the class names
    exported = str(tmp_path / "model.pt2")
    result = invoke(["export", "--config", tmp_path / "cfg.yaml", "--checkpoint", run / "checkpoints" /
                     "ckpt_latest.pth", "--format", "pt2", "--out", exported])
    assert result.exit_code == 0, result.stderr
    assert json.loads(open(exported + ".json").read())["classes"] == ["bird", "cat", "dog"]
    result = invoke(["predict", "--config", tmp_path / "cfg.yaml", "--model", exported, "--input",
                     tmp_path / "img" / "cat0.png", "--out", tmp_path / "pred_model"])
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "pred_model" / "predictions.jsonl").read_text().splitlines()[0])
    assert (record["label"], record["class"]) == (1, "cat")
    # a val class the train set lacks: one line naming the class and the file
    (tmp_path / "odd.csv").write_text("path,label\nimg/dog0.png,fox\n")
    cfg = csv_cfg(tmp_path / "train.csv", tmp_path / "odd.csv")
    result = invoke(["train", "--config", write_yaml(tmp_path / "odd.yaml", cfg), "--work-dir", tmp_path / "odd"])
    assert_one_line(result, "odd.csv", "class 'fox' is not one of the 3 classes of dataset.train")


def test_resume_with_another_label_map_is_refused(tmp_path):
    gray_images(tmp_path / "img", {"a.png": 0, "b.png": 255})
    (tmp_path / "list.csv").write_text("path,label\nimg/a.png,x\nimg/b.png,y\n")
    cfg = csv_cfg(tmp_path / "list.csv", tmp_path / "list.csv", epochs=1)
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert result.exit_code == 0, result.stderr
    (tmp_path / "list.csv").write_text("path,label\nimg/a.png,x\nimg/b.png,w\n")
    cfg["trainer"]["max_epoch"] = 2
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run",
                     "--resume", tmp_path / "run" / "checkpoints" / "ckpt_latest.pth"])
    assert_one_line(result, "was trained on the classes x, y", "has w, x")


def test_data_check_reports_a_val_class_train_lacks_by_label_map(digits, tmp_path):
    coco, img_dir, ann = digits
    val = copy.deepcopy(coco)
    val["categories"][0]["name"] = "renamed"
    (tmp_path / "val.json").write_text(json.dumps(val))
    cfg = det_cfg(coco_entry(ann, img_dir), coco_entry(tmp_path / "val.json", img_dir))
    result = invoke(["data", "check", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--out", tmp_path / "r"])
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    found = [f for f in report["findings"] if f["check"] == "label map"]
    assert found and "category id 1 is 'renamed' here but '0'" in found[0]["message"], report["findings"]
    assert result.exit_code == 0, result.stderr


# -- one names check -------------------------------------------------------------------------------
def test_duplicate_yolo_names_are_refused(digits, tmp_path):
    """data.yaml names [B, B, C] merged two classes (class-0 boxes trained as the last 'B')."""
    coco, img_dir, _ = digits
    data = write_yolo({"train": (coco, img_dir)}, str(tmp_path / "yolo"), names_as_dict=False)
    text = open(data).read()
    with open(data, "w") as f:
        f.write(text.replace("- '1'\n", "- '0'\n", 1))
    entry = {"type": "yolo", "kwargs": {"data": data, "split": "train"}}
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", det_cfg(entry)), "--work-dir",
                     tmp_path / "run"])
    assert_one_line(result, "data.yaml: names", "'0' is listed twice")
    entry["kwargs"]["classes"] = ["a", " a", *"bcdefghi"]
    with open(data, "w") as f:
        f.write(text)
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", det_cfg(entry)), "--work-dir",
                     tmp_path / "run"])
    assert_one_line(result, "dataset.train.kwargs.classes", "'a' is listed twice")


def test_csv_and_voc_classes_are_checked_the_same_way(digits, tmp_path):
    gray_images(tmp_path / "img", {"a.png": 0})
    (tmp_path / "list.csv").write_text("path,label\nimg/a.png,x\n")
    cfg = csv_cfg(tmp_path / "list.csv", tmp_path / "list.csv", epochs=1)
    cfg["dataset"]["train"]["kwargs"]["classes"] = ["x", "y", "x"]
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert_one_line(result, "dataset.train.kwargs.classes", "'x' is listed twice")
    coco, img_dir, _ = digits
    root = write_voc(coco, img_dir, str(tmp_path / "voc"), "train")
    entry = {"type": "voc", "kwargs": {"root": root, "split": "train", "classes": [*"0123456789", ""]}}
    result = invoke(["train", "--config", write_yaml(tmp_path / "v.yaml", det_cfg(entry)), "--work-dir",
                     tmp_path / "v"])
    assert_one_line(result, "dataset.train.kwargs.classes", "empty class name")


def test_convert_maps_a_split_without_one_class_by_name(digits, tmp_path):
    """VOC train and val lists, val without the first class: the YOLO output numbers val's
    boxes as train's (it used to refuse the split for differing class lists)."""
    coco, img_dir, _ = digits
    root = write_voc(coco, img_dir, str(tmp_path / "voc"), "train")
    ann = os.path.join(root, "Annotations")
    first = sorted(set().union(*(names_in(os.path.join(ann, f)) for f in os.listdir(ann))))[0]
    val_ids = sorted(f[:-4] for f in os.listdir(ann) if first not in names_in(os.path.join(ann, f)))
    with open(os.path.join(root, "ImageSets", "Main", "val.txt"), "w") as f:
        f.write("".join(i + "\n" for i in val_ids))
    result = invoke(["data", "convert", "--from", "voc", "--input", root, "--to", "yolo", "--out", tmp_path / "y"])
    assert result.exit_code == 0, result.stderr
    import yaml

    names = yaml.safe_load((tmp_path / "y" / "data.yaml").read_text())["names"]
    for stem in val_ids:
        label = tmp_path / "y" / "labels" / "val" / f"{stem}.txt"
        written = sorted(names[int(line.split()[0])] for line in label.read_text().splitlines())
        assert written == sorted(re.findall(r"<name>(.*?)</name>", open(os.path.join(ann, stem + ".xml")).read()))


def test_coco_categories_under_one_name_are_refused(digits, tmp_path):
    """Two category ids named alike: mapping by name could not tell them apart."""
    coco, img_dir, _ = digits
    twice = copy.deepcopy(coco)
    twice["categories"][1]["name"] = twice["categories"][0]["name"] + " "
    (tmp_path / "twice.json").write_text(json.dumps(twice))
    cfg = det_cfg(coco_entry(tmp_path / "twice.json", img_dir))
    result = invoke(["train", "--config", write_yaml(tmp_path / "cfg.yaml", cfg), "--work-dir", tmp_path / "run"])
    assert_one_line(result, "twice.json: categories' names: [1]:", f"{coco['categories'][0]['name']!r} is listed twice")
