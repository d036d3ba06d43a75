"""Which COCOeval runs the bbox evaluation: pycocotools, or faster-coco-eval when installed.

faster-coco-eval reimplements COCOeval's evaluate/accumulate in C++ with the same matching
rules, so every summary value (AP, AP50 ... ARl) and the precision array equal pycocotools'
(tests/tasks/det/test_coco_backend.py compares them). ``auto`` takes it when it imports, else
pycocotools (a dependency of the package, always there).
"""
import contextlib
import io

BACKENDS = ("auto", "faster_coco_eval", "pycocotools")


def faster_available():
    try:
        import faster_coco_eval  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(name):
    """The backend that runs for ``name`` (auto -> the faster one when installed)."""
    from ...errors import ConfigError

    if name not in BACKENDS:
        raise ConfigError("backend", f"{name!r} is not one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "faster_coco_eval" if faster_available() else "pycocotools"
    if name == "faster_coco_eval" and not faster_available():
        raise ConfigError("backend", "faster_coco_eval is not installed",
                          "pip install faster-coco-eval (or up-trainer[fastcoco]), or use backend: auto")
    return name


def _api(backend):
    if backend == "faster_coco_eval":
        from faster_coco_eval import COCO, COCOeval_faster

        return COCO, COCOeval_faster
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    return COCO, COCOeval


def run_bbox_eval(gt_dict, dets, backend="pycocotools", max_dets=100):
    """COCOeval on a ground-truth dict and a detection list (both COCO format, non-empty dets).

    Returns (evaluator, printed summary): ``evaluator.stats`` holds the 12 summary values,
    ``evaluator.eval["precision"]`` the [T, R, K, A, M] precision array.
    """
    coco_cls, eval_cls = _api(backend)
    with contextlib.redirect_stdout(io.StringIO()) as buf:  # both print; the caller logs
        gt = coco_cls()
        gt.dataset = gt_dict
        gt.createIndex()
        ev = eval_cls(gt, box_results(gt, dets, coco_cls), "bbox")
        ev.params.maxDets = [1, 10, max_dets]
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev, buf.getvalue()


def box_results(gt, dets, coco_cls):
    """The detections as a result set of ``gt``: what ``gt.loadRes(dets)`` builds for boxes
    (ids from 1, area w x h, iscrowd 0, set in place as loadRes does) without the polygon of
    each box that it adds for mask evaluation, a fifth of an evaluation's time at 500k boxes."""
    for i, det in enumerate(dets, 1):
        bbox = det["bbox"]
        det["area"], det["id"], det["iscrowd"] = bbox[2] * bbox[3], i, 0
    res = coco_cls()
    res.dataset = {"images": list(gt.dataset["images"]), "categories": gt.dataset["categories"], "annotations": dets}
    res.createIndex()
    return res
