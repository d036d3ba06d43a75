"""What one part of the package may look for on another: every optional member, named once.

A data set, an evaluator, a net, an export graph or a pipeline op need not have all of these;
the code that hands one on checks for a capability here, by name, and nowhere else:

- the ``runtime_checkable`` capability protocols (``ConvertsIn``, ``ReadsInputs``, ...) are
  checked with ``isinstance`` where the caller does something only when the member exists;
- the plain protocols (``DataSet``, ``Evaluator``, ``Net``, ...) list every optional member of
  that kind of object with its meaning and the value assumed when it is absent; a probe
  ``getattr(obj, "name", default)`` on one of the package's objects uses only these names
  (``tests/project/test_probes.py`` holds the package to that).

Nothing here is inherited: the protocols describe, the objects stay what they are.
"""
from typing import Any, Protocol, runtime_checkable

# --- data sets ------------------------------------------------------------------------------


class DataSet(Protocol):
    """A data set of ``DATASETS``. Beyond ``__len__`` / ``__getitem__``, all optional."""

    classes: list  # class names in label order ([] / absent: the set does not say)
    num_classes: Any  # an int, or a list of counts (UP's multi-head labels: one head each)
    numbered_classes: bool  # the names are only label numbers (files of indices); default False
    file_cat_ids: Any  # COCO category ids as the file holds them (None: not COCO)
    cat_ids: list  # the category ids written back with the predictions
    records: Any  # the parsed rows (list or PackedRecords); absent: generated samples
    samples: list  # a torchvision-style folder set's rows
    transform: Any  # the pipeline (a v2.Compose or one op)
    reader: Any  # the image reader (see ``Reader``)
    model_input: Any  # the model-input step (data/model_input.ModelInput)
    exif_transpose: bool  # a reader-less set's EXIF choice; default True
    color_mode: str  # "RGB", "BGR" or "L"; default "RGB"
    default_evaluator: dict  # the evaluator entry used when the config names none
    save_score: bool  # UP's save_score: every class score in the results; default False
    image_classes: Any  # per image, the classes it holds (repeat-factor sampling)
    aspect_ratios: Any  # per image, width / height (aspect-ratio grouping)
    skipped: list  # one message per bad record left out; default []
    notes: list  # remarks of a format conversion
    generates_samples: bool  # samples are made, not read (no records to check); default False
    collate_fn: Any  # its own batch collation; default torch's default_collate
    training_problem: Any  # a reason this set cannot be trained on (None: none)
    meta_file: str  # where its rows come from, named in messages
    ann_file: str
    where: str
    has_annotations: bool  # False for an inference-only list of images; default True

    def convert_in(self, normalize_on: str) -> None: ...  # where its model-input step runs
    def used_labels(self) -> set: ...  # the labels its records use (with ``relabel``)
    def relabel(self, mapping: dict, classes: list, run_ids: Any = None) -> None: ...
    def image_files(self) -> list: ...  # every image path (the image cache's warm-up)


@runtime_checkable
class ConvertsIn(Protocol):
    """A set whose model-input step (uint8 -> float, normalization) can run in the loader
    workers or on the device (``dataset.normalize_on``)."""

    def convert_in(self, normalize_on: str) -> None: ...


@runtime_checkable
class UsesContext(Protocol):
    """A set that reads with a run's DataContext (data/context.py: where its model-input step
    runs, the pixel limit, the image cache), handed over by the builder."""

    def use_context(self, context: Any) -> None: ...


@runtime_checkable
class Relabels(Protocol):
    """A set that can be mapped by name onto another set's classes (data/label_map.align)."""

    def used_labels(self) -> set: ...
    def relabel(self, mapping: dict, classes: list, run_ids: Any = None) -> None: ...


@runtime_checkable
class ListsImageFiles(Protocol):
    """A set that can name all its image files up front (the shared image cache)."""

    def image_files(self) -> list: ...


class Reader(Protocol):
    """A data set's image reader (data/readers.py)."""

    exif_transpose: bool  # default True
    color_mode: str  # default "RGB"


# --- pipeline ops ---------------------------------------------------------------------------


class PipelineOp(Protocol):
    """One op of a data set's transform; all optional."""

    transforms: list  # a composition's ops, in order

    def bind(self, dataset: Any) -> None: ...  # mixing ops (mosaic, mixup) read other samples
    def begin_batch(self) -> None: ...  # ops that choose one size per batch (multi-scale)
    def end_batch(self) -> None: ...
    def fold_model_input(self, model_input: Any) -> Any: ...  # an op that does the normalization


@runtime_checkable
class BindsDataSet(Protocol):
    def bind(self, dataset: Any) -> None: ...


@runtime_checkable
class PerBatch(Protocol):
    """An op with one random choice per batch: told where each batch begins."""

    def begin_batch(self) -> None: ...
    def end_batch(self) -> None: ...


# --- evaluators -----------------------------------------------------------------------------


class Evaluator(Protocol):
    """An evaluator of ``EVALUATORS``. Beyond ``eval(results)``, all optional."""

    save_scores: bool  # write every class score to the results file (UP's save_score)
    topk: Any  # a classification evaluator: its top-k (insight pages show wrong images)
    primary_metric: str  # the metric int8 calibration compares

    def read_inputs(self) -> None: ...  # read the files it needs, before training starts
    def set_heads(self, heads: int) -> None: ...  # one classifier head per label list
    def load_files(self) -> None: ...  # its ground-truth files, read once
    def insight(self, results: Any, out_dir: str, dataset: Any = None, **kwargs: Any) -> Any: ...


@runtime_checkable
class ReadsInputs(Protocol):
    def read_inputs(self) -> None: ...


@runtime_checkable
class HasHeads(Protocol):
    def set_heads(self, heads: int) -> None: ...


@runtime_checkable
class SavesScores(Protocol):
    save_scores: bool


@runtime_checkable
class LoadsFiles(Protocol):
    def load_files(self) -> None: ...


@runtime_checkable
class RunsTasks(Protocol):
    """A net with a head per task (tasks/up_nets/multitask_net.py): which heads each task runs."""

    head_names: list
    norm_task_count: Any  # the fewest tasks a per-task norm (task_sync_bn) keeps statistics for; None: none

    def use_tasks(self, names: list, heads: list, loss_weights: list) -> None: ...
    def set_task(self, idx: int) -> None: ...


@runtime_checkable
class EvaluatesTasks(Protocol):
    """A multitask run's evaluator: each task on its own data (multitask/evaluation.py)."""

    def evaluate_tasks(self, trainer: Any, main_loaders: Any, max_batches: Any = None) -> Any: ...


@runtime_checkable
class WritesInsight(Protocol):
    """An evaluator that writes where the model fails (the eval_insight hook, ``up eval --insight``)."""

    def insight(self, results: Any, out_dir: str, dataset: Any = None, **kwargs: Any) -> Any: ...


# --- nets: classifiers and detectors --------------------------------------------------------


class Net(Protocol):
    """A net built from ``net:`` (classifier or detector). All optional."""

    num_classes: Any  # its output count (int), or one count per head (list)
    num_classes_path: str  # a UP net: the config key that sets its class count
    num_classes_counts_background: bool  # UP's count includes background (+1); default False
    sync_bn_group_size: Any  # a UP net's normalize: sync_bn (None: not asked for; 0: all ranks)
    recorded_classes: Any  # the label map a loaded checkpoint or export record names
    in_channels: int  # image channels it takes; default 3
    task: str  # "det" for a detector that is not one of the known kinds
    is_classifier: bool  # the first entry of a composed net is a classifier; default False
    model: Any  # a wrapper's (test-time augmentation) inner net
    path: str  # a loaded exported model's file

    def translate_up_weights(self, state: dict) -> dict: ...  # UP's parameter names -> ours
    def fuse_for_inference(self) -> Any: ...  # re-parameterised nets (YOLOv6) fuse for predict
    def collect_grad(self, grad: Any) -> None: ...  # a loss that reads gradients (EFL)
    def check_batch_size(self, batch_size: int, world_size: int) -> None: ...  # MoCo's queue vs the batch
    def check_pretrained(self, report: dict, source: str) -> None: ...  # frozen parts must load (UP's self)


class Detector(Net, Protocol):
    """A detection net; beyond ``Net``, all optional."""

    kind: str  # the family of our own nets ("yolox", "atss", ...), for export and TTA
    detector: Any  # a torchvision detector inside (RetinaNet, FCOS, Faster R-CNN, SSDlite)
    postprocess: Any  # the part that holds score_thresh / nms_thresh (our dense families)
    predictor: Any  # the same for the two-stage families
    image_mean: Any  # the ATSS net normalises itself, then pads with 0
    up_loss_weights: dict  # a UP file's loss_weight per loss name
    use_l1: bool  # YOLOX: the L1 loss of the last epochs (the no-aug hook turns it on)
    cls_loss: Any  # a criterion's classification loss (a module with state: EFL)
    needs_predictions: bool  # an assigner whose costs use the predictions (SimOTA)


class Classifier(Net, Protocol):
    """A classification net; nothing beyond ``Net``."""


@runtime_checkable
class TranslatesUpWeights(Protocol):
    def translate_up_weights(self, state: dict) -> dict: ...


@runtime_checkable
class ChecksBatchSize(Protocol):
    def check_batch_size(self, batch_size: int, world_size: int) -> None: ...


@runtime_checkable
class ChecksPretrained(Protocol):
    def check_pretrained(self, report: dict, source: str) -> None: ...


@runtime_checkable
class SamplesSubnetFlops(Protocol):  # a BigNAS supernet: up flops adds its sampled subnets
    def sampled_flops_lines(self, size: tuple) -> list: ...


@runtime_checkable
class NamesUpModules(Protocol):
    """A net built from a UP net list that maps UP's module paths onto its own (distill jobs)."""

    def up_module_path(self, name: str) -> Any: ...  # our dotted path, or None


class FeatureMaps(Protocol):
    """A UP backbone or FPN part: the channels and strides of the maps it gives (distill.adapt)."""

    out_planes: list  # a backbone's channels per map
    out_strides: list  # the stride of each map


@runtime_checkable
class EvaluatesItself(Protocol):  # a BigNAS net: sampled subnets / BatchNorm re-estimation in its evaluation
    def evaluate_in(self, trainer: Any) -> Any: ...


@runtime_checkable
class FusesForInference(Protocol):
    def fuse_for_inference(self) -> Any: ...


@runtime_checkable
class CollectsGrad(Protocol):
    def collect_grad(self, grad: Any) -> None: ...


# --- exporters ------------------------------------------------------------------------------


class ExportGraph(Protocol):
    """An export graph of a detection family (export/dense.py, two_stage.py); all optional."""

    select: Any  # the selection step holding the spec (two-stage)
    levels: Any  # a dense graph's feature levels
    dense: Any  # a two-stage graph's dense first stage
    normalize_by_size: Any  # a box coder whose offsets scale with the anchor size


class ModuleProxy(Protocol):
    """tasks/det/models.py's stand-in for a part of a torchvision detector (scripted export)."""

    _names: tuple  # the path of the real module it stands for
    out_channels: int  # the channel count torchvision reads off the part


# --- the run: trainer, hooks, writers, optimization -----------------------------------------


class Trainer(Protocol):
    """What hooks may look for on the trainer before it is fully built."""

    loaders: Any  # the LoaderFactory (absent: eval only)
    ema: Any  # the EMA hook's averaged model (None: no EMA)
    class_names: Any  # the label map of this run
    test_set: Any  # on loaders: the evaluation set


class Hook(Protocol):
    name: str  # its key in checkpoints
    type_name: str  # its type as the YAML names it


class Writer(Protocol):
    """A metrics writer (writers/); all optional."""

    images_from_hooks: bool  # takes images sent by hooks; default False

    def validate_kwargs(self, kwargs: dict) -> None: ...  # checks its kwargs before the run
    def add_image(self, tag: str, image: Any, step: int) -> None: ...
    def add_config(self, cfg: dict) -> None: ...
    def add_artifact(self, path: str) -> None: ...


@runtime_checkable
class TakesConfig(Protocol):
    """A writer that records the run's (redacted) config."""

    def add_config(self, cfg: dict) -> None: ...


@runtime_checkable
class TakesArtifacts(Protocol):
    """A writer that uploads the run's files at its end."""

    def add_artifact(self, path: str) -> None: ...


@runtime_checkable
class TakesImages(Protocol):
    """A writer (or the logger hook over the writers) that shows hooks' pictures."""

    def add_image(self, tag: str, image: Any, step: int) -> None: ...


class Optimization(Protocol):
    """engine/optim.Optimization as the dry run describes it."""

    precision: Any
    amp_dtype: Any
    scaler: Any

    def describe(self) -> str: ...  # on its precision


DECLARED = (DataSet, Reader, PipelineOp, Evaluator, Net, Detector, Classifier, ExportGraph, ModuleProxy, Trainer, Hook,
            Writer, Optimization)
