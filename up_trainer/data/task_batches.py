"""One training step's batches of a multitask run: one batch per task, in task order."""


class TaskBatches(list):
    """Task i's batch at index i. :func:`up_trainer.data.model_input.batch_to_model` moves and
    converts each; a multitask net runs each task on its own (tasks/up_nets/multitask_net.py).
    Built by the multitask loaders (up_trainer/multitask/loaders.py)."""
