"""Self-supervised pretraining: MoCo v1/v2/v3, SimCLR, SimSiam and MAE as classification-family
models (docs/ssl.rst).

A pretraining model takes the training batch of a classification data set and returns
``{"loss": ...}``; its labels are never read. The contrastive ones (MoCo, SimCLR, SimSiam) read
two views of every image (``batch["image"]``: N x 2 x C x H x W, made by the ``two_views``
transform or UP's ``torch_mocov1/v2/v3``, ``torch_simclrv1`` pipelines, :mod:`.views`); MAE reads
one. The encoder is a UP backbone (``resnet50``, ``vit_base_patch16_224``, ...) kept under the
model's ``backbone`` child, so a checkpoint's ``backbone.*`` weights load into a classifier
with that backbone (a linear probe or fine-tune run's ``saver.pretrain_model``) as they are.

- :mod:`.views`: the two-view augmentation;
- :mod:`.encoder`: the backbone and its pooled embedding;
- :mod:`.contrastive`: MoCo, SimCLR, SimSiam and their losses;
- :mod:`.mae`: the masked autoencoder;
- :mod:`.models`: the ``net`` types (``moco``, ``simclr``, ``simsiam``, ``mae``).
"""
