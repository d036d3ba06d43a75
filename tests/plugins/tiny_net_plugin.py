"""Loaded through runtime.imports (tests/plugins on PYTHONPATH): a classifier small enough that
torch.compile builds it in seconds on CPU (test_speed_levers.py)."""
import torch.nn.functional as F
from torch import nn

from up_trainer.registry import MODELS


@MODELS.register("tiny_convnet")
class TinyConvNet(nn.Module):
    """Test only: conv, BatchNorm, ReLU, global pooling, linear; outputs as ClassificationModel's."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, width: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, batch):
        x = F.relu(self.bn(self.conv(batch["image"])))
        logits = self.fc(x.mean(dim=(2, 3)))
        out = {"logits": logits}
        if "label" in batch:
            out["loss"] = F.cross_entropy(logits, batch["label"])
        if not self.training:
            out["scores"] = logits.softmax(dim=1)
            out["preds"] = out["scores"].argmax(dim=1)
        return out
