"""UP's BigNAS supernet training for detection: the elastic RetinaNet of :mod:`.bignas_elastic`,
one subnet per training iteration chosen by the sandwich rule of :mod:`.bignas_sampling`.
Evaluation runs the largest subnet.
"""
from ..det.atss import RetinaPlusModel
from .bignas_sampling import SandwichSampling, read_part_space, read_schedule, sample

PART_ELEMENTS = {0: ("depth", "out_channel", "kernel_size", "expand_ratio"), 1: ("depth", "out_channel", "kernel_size"),
                 2: ("depth", "out_channel", "kernel_size")}


def read_space(opts):
    """{part index: {element: (allowed values per stage, sample strategy)}} of the supernet's
    three elastic entries (their element kwargs consumed), and the per-step schedule."""
    space = {i: read_part_space(opts[i], elements, {"kernel_size": [3]} if i == 2 else None, stem=i == 0)
             for i, elements in PART_ELEMENTS.items()}
    return space, read_schedule(opts[0])


class BigNASSupernet(SandwichSampling, RetinaPlusModel):
    """The ATSS RetinaNet on elastic parts; ``space``/``schedule`` from :func:`read_space`."""

    kind = "retina_plus"

    def __init__(self, *args, space, schedule, sampling=None, accuracy=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.init_sampling(space, schedule, sampling)
        self.accuracy = accuracy  # UP's sample_accuracy options for up eval: bignas_accuracy.py

    def set_subnet(self, mode, rng=None):
        """Activate the subnet ``mode`` names (max, min or random with ``rng``); returns its settings."""
        settings = {"backbone": sample(self.space[0], mode, rng), "neck": sample(self.space[1], mode, rng),
                    "roi_head.cls_subnet": sample(self.space[2], mode, rng),
                    "roi_head.box_subnet": sample(self.space[2], mode, rng)}
        self.activate(settings)
        self.subnet = (mode, settings)
        return settings

    def activate(self, settings):
        """Activate the subnet of ``settings`` (as set_subnet returns them)."""
        self.backbone.active = settings["backbone"]
        self.neck.active = settings["neck"]
        self.roi_head.active = {"cls_subnet": settings["roi_head.cls_subnet"],
                                "box_subnet": settings["roi_head.box_subnet"]}
        self.subnet = ("subnet", settings)

    def evaluate_in(self, trainer):
        """up eval: UP's sample_accuracy phase when the file asks for it, else the largest subnet."""
        if self.accuracy is None:
            return trainer.evaluate()
        from .bignas_accuracy import sample_accuracy

        return sample_accuracy(trainer, self, self.accuracy)

    def forward(self, batch):
        self.choose_subnet()
        losses = super().forward(batch)
        if not self.training:
            return losses
        return {**losses, "loss_cls": self.touch_all(losses["loss_cls"])}
