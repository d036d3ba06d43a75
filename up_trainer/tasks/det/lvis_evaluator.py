"""UP's ``LVIS`` evaluator: LVIS's federated box AP (lvis_eval.py) without the lvis package.

UP scores with lvis-api (``lvis`` on PyPI), whose install requires opencv-python, which this
project does not take; lvis_eval.py applies lvis-api's rules on pycocotools' COCOeval.

Ground-truth boxes travel with the test batches as for ``COCO`` (the images the test dataset
kept); ``gt_file`` (UP's kwarg: the LVIS file) is read when evaluating, for what the batches do
not carry: each image's ``neg_category_ids`` / ``not_exhaustive_category_ids`` and each
category's ``frequency``. Metric keys ``bbox.AP`` (primary), ``bbox.AP50``, ``bbox.AP75``,
``bbox.APs/m/l``, ``bbox.APr/c/f`` (rare, common, frequent), ``bbox.AR300``.
"""
import logging
from typing import Optional

from ...errors import ConfigError
from ...registry import EVALUATORS
from .evaluator import CocoEvaluator

log = logging.getLogger("up")


@EVALUATORS.register("LVIS", aliases=("lvis",))
class LvisEvaluator(CocoEvaluator):
    def __init__(self, gt_file: str, iou_types: list = ("bbox",), cmp_key: Optional[str] = None,
                 max_dets: int = 300):
        from .lvis_eval import KEYS

        super().__init__(iou_types, per_class=False, max_dets=max_dets, backend="pycocotools")
        if cmp_key is not None and cmp_key not in [f"bbox.{k}" for k in KEYS]:
            raise ConfigError("cmp_key", f"{cmp_key!r} is not one of the LVIS metrics "
                              f"({', '.join(f'bbox.{k}' for k in KEYS)})")
        self.gt_file = gt_file
        self.primary_metric = cmp_key or "bbox.AP"
        self._lists = None  # (per-image lists, category frequencies) of gt_file, once read

    def read_inputs(self):
        """Read and check gt_file when the run is built (engine/builder.py), so a missing or
        malformed file stops the run before training, not at its first evaluation. ``up
        config`` builds the evaluator without calling this (the file may not be here)."""
        from .datasets import read_json
        from .lvis_dataset import check_lvis

        self._lists = check_lvis(read_json(self.gt_file, "LVIS evaluator gt_file"), self.gt_file)

    def metric_keys(self):
        from .lvis_eval import KEYS

        return [f"bbox.{k}" for k in KEYS]

    def evaluate(self, results):
        from .lvis_eval import KEYS, lvis_metrics

        self.classes, self.cat_ids = self._label_map(results)
        self.coco_eval = None
        gt_dict, dets = self.to_coco(results)
        if not gt_dict["images"]:
            return {f"bbox.{k}": -1.0 for k in KEYS}
        if self._lists is None:
            self.read_inputs()
        image_lists, frequencies = self._lists
        values, self.coco_eval = lvis_metrics(gt_dict, dets, image_lists, frequencies, self.max_dets)
        log.info("LVIS bbox evaluation:\n%s", "\n".join(f"  {k:<6} {v:>7.4f}" for k, v in values.items()))
        losses = [r["loss"] for r in self.unique(results) if "loss" in r]
        val_loss = {"val_loss": sum(losses) / len(losses)} if losses else {}
        return {**{f"bbox.{k}": v for k, v in values.items()}, **val_loss}
