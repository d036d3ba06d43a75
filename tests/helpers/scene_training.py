"""Train a detector on digit scenes in a test and measure its COCO AP: the loop the family
tests share (one thread, seeded draws of 8 scenes, AdamW), so each test states only its net,
its step count and its learning rate."""
import torch


def digit_scene_metrics(model, steps, lr, before_eval=None, train_images=128, val_images=16):
    """bbox metrics on ``val_images`` unseen 64 px scenes of 1-2 digits after ``steps`` AdamW
    steps of 8 on ``train_images`` scenes; ``before_eval(model)`` runs after model.eval()
    (e.g. fusing re-parameterised blocks into the deploy form)."""
    from up_trainer.tasks.det.digits_det import DigitsDetection
    from up_trainer.tasks.det.evaluator import CocoEvaluator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        scenes = dict(canvas_size=64, digits_per_image=[1, 2], scale_range=[16, 28], seed=0)
        train = DigitsDetection("train", train_images, **scenes)
        val = DigitsDetection("val", val_images, **scenes)
        samples = [train[i] for i in range(len(train))]
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
        g = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(steps):
            pick = torch.randint(len(samples), (8,), generator=g).tolist()
            batch = {"image": [samples[i]["image"] for i in pick], "target": [samples[i]["target"] for i in pick]}
            losses = model(batch)
            opt.zero_grad()
            sum(losses.values()).backward()
            opt.step()
        model.eval()
        if before_eval is not None:
            before_eval(model)
        evaluator = CocoEvaluator(per_class=False)
        batch = [val[i] for i in range(len(val))]
        with torch.no_grad():
            out = model({"image": [s["image"] for s in batch]})
        evaluator.process({"index": torch.arange(len(batch)), "target": [s["target"] for s in batch]}, out)
        return evaluator.evaluate(evaluator.results())
    finally:
        torch.set_num_threads(threads)
