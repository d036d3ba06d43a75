"""The digits file read directly equals what scikit-learn's own loader returns."""
import numpy as np


def test_direct_read_matches_sklearn():
    from sklearn.datasets import load_digits

    from up_trainer.tasks.cls.datasets import _load_digits

    images, labels = _load_digits()
    ref = load_digits()
    assert np.array_equal(images, ref.images) and np.array_equal(labels, ref.target)
