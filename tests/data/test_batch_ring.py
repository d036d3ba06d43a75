"""Batches from workers through the reused shared-memory ring (data/batch_ring.py): the same
batches as DataLoader's own transport, slots freed however a batch ends, and the ordinary way
for what does not fit."""
import collections
import os

import pytest
import torch
from torch.utils.data import Dataset

from up_trainer.data import batch_ring
from up_trainer.data.loader import WorkerTrackingLoader

Pair = collections.namedtuple("Pair", "first second")


class Samples(Dataset):
    """Each sample's values are a function of its index, so a slot overwritten before it was
    read shows as a wrong value; images in both memory layouts, targets of several dtypes."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        image = torch.arange(3 * 20 * 30, dtype=torch.int64).reshape(3, 20, 30).add(i).remainder(251).to(torch.uint8)
        if i % 2:  # a CxHxW view of HxWxC memory, as a decoded image is
            image = image.permute(1, 2, 0).contiguous().permute(2, 0, 1)
        return {"image": image, "boxes": torch.full((i % 4, 4), float(i)), "index": i,
                "pair": Pair(torch.tensor([i, -i]), torch.ones(2, dtype=torch.bool)), "name": f"s{i}"}


def collate(samples):
    return {"image": [s["image"] for s in samples], "boxes": [s["boxes"] for s in samples],
            "index": torch.tensor([s["index"] for s in samples]), "pairs": tuple(s["pair"] for s in samples),
            "names": [s["name"] for s in samples]}


def epochs(transport, count=2, stop_after=None, **kwargs):
    loader = WorkerTrackingLoader(Samples(), batch_size=4, num_workers=2, collate_fn=collate, transport=transport,
                                  timeout=60, **kwargs)
    out = []
    for _ in range(count):
        batches = []
        for batch in loader:
            batches.append(batch)
            if stop_after is not None and len(batches) == stop_after:
                break
        out.append(batches)
    return loader, out


def assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride())
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def test_ring_batches_equal_dataloaders_own_in_values_types_and_layout():
    loader, ring = epochs("ring", persistent_workers=True, prefetch_factor=3)
    _, plain = epochs("torch", persistent_workers=True, prefetch_factor=3)
    assert loader._ring is not None and len(ring[1]) == 10
    assert_same(ring, plain)
    # what the main process holds is its own memory, not the ring's (which the workers reuse)
    assert not ring[1][0]["image"][0].is_shared()


@pytest.mark.parametrize("persistent", [True, False])
def test_an_epoch_left_early_frees_its_slots(persistent):
    # The batches in flight when the epoch is left are dropped unread: their slots must come
    # back, else the workers wait for them forever (the loader's timeout turns that into an error).
    _, out = epochs("ring", count=3, stop_after=1, persistent_workers=persistent)
    assert [len(batches) for batches in out] == [1, 1, 1]
    _, full = epochs("ring", count=1, persistent_workers=persistent)
    assert_same(out[2][0], full[0][0])


def test_a_batch_larger_than_a_slot_goes_the_ordinary_way(monkeypatch):
    monkeypatch.setattr(batch_ring, "SLOT_BYTES", 4096)  # less than 4 images of 1,800 bytes
    loader, out = epochs("ring", count=1)
    _, plain = epochs("torch", count=1)
    assert loader._ring.slot_bytes == 4096
    assert_same(out, plain)


def test_two_iterators_of_one_loader_each_have_their_ring():
    loader = WorkerTrackingLoader(Samples(), batch_size=4, num_workers=2, collate_fn=collate, timeout=60)
    first, second = iter(loader), iter(loader)
    pairs = list(zip(first, second))  # consumed in turn: the first iterator's ring must stay alive
    _, plain = epochs("torch", count=1)
    assert_same([a for a, _ in pairs], plain[0])
    assert_same([b for _, b in pairs], plain[0])


def test_without_shared_memory_batches_go_the_ordinary_way(monkeypatch):
    def no_ring(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("up_trainer.data.worker_loader.BatchRing", no_ring)
    loader, out = epochs("ring", count=1)
    _, plain = epochs("torch", count=1)
    assert loader._ring is None
    assert_same(out, plain)


def test_slot_size_splits_the_rings_address_space(monkeypatch):
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PHYS_PAGES": 2**22, "SC_PAGE_SIZE": 4096}[name])  # 16 GB
    assert batch_ring.slot_bytes_for(2, 3) == 4 * 2**30 // 6 // 64 * 64  # 4 GB over 6 slots
    assert batch_ring.slot_bytes_for(128, 3) == 16 * 2**20  # never under 16 MB
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PHYS_PAGES": 2**19, "SC_PAGE_SIZE": 4096}[name])  # 2 GB
    assert batch_ring.slot_bytes_for(1, 2) == 2**30 // 4  # a quarter of the memory, over 2 slots


def test_slots_are_reused_in_order_and_held_until_copied_out():
    ctx = torch.multiprocessing.get_context("fork")
    ring = batch_ring.BatchRing(1, 2, ctx, slot_bytes=1024)
    assert [ring._free[s].acquire(block=False) for s in (0, 1)] == [True, True]
    lease = batch_ring.Lease(ring.id, 1, 2, received=True)
    ring.view(1024, (4,), (1,), torch.int16).copy_(torch.tensor([1, 2, 3, 4], dtype=torch.int16))
    first = batch_ring.RingTensor(lease, 1024, (4,), (1,), torch.int16)
    second = batch_ring.RingTensor(lease, 1024, (2,), (1,), torch.int16)
    assert batch_ring.unpack({"a": [first, first]})["a"][0].tolist() == [1, 2, 3, 4]
    assert not ring._free[1].acquire(block=False)  # one of the batch's two tensors still unread
    assert batch_ring.unpack((second,))[0].tolist() == [1, 2]
    assert ring._free[1].acquire(block=False)  # both read: the slot is free again
    dropped = batch_ring.Lease(ring.id, 0, 1, received=True)
    del dropped  # a batch dropped unread frees its slot too
    assert ring._free[0].acquire(block=False)


def test_the_pin_memory_thread_copies_descriptors_out_and_frees_the_slot(monkeypatch):
    # With an accelerator DataLoader's pin-memory thread walks each batch as it arrives and calls
    # pin_memory() on what it finds; pinning itself needs an accelerator, so it is a copy here.
    from torch.utils.data._utils.pin_memory import pin_memory

    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self.clone())
    ctx = torch.multiprocessing.get_context("fork")
    ring = batch_ring.BatchRing(1, 1, ctx, slot_bytes=1024)
    assert ring._free[0].acquire(block=False)
    ring.view(0, (2, 2), (1, 2), torch.float32).copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    lease = batch_ring.Lease(ring.id, 0, 1, received=True)
    image = batch_ring.RingTensor(lease, 0, (2, 2), (1, 2), torch.float32)
    lease.count = 2  # and a second tensor, after the same image listed twice
    batch = {"image": [image, image], "second": batch_ring.RingTensor(lease, 0, (1,), (1,), torch.float32),
             "name": "x"}
    pinned = pin_memory(batch)
    assert pinned["image"][0].tolist() == [[1.0, 2.0], [3.0, 4.0]] and pinned["name"] == "x"
    assert pinned["image"][0].stride() == (1, 2)
    assert pinned["second"].tolist() == [1.0]
    assert ring._free[0].acquire(block=False)
    assert batch_ring.unpack(pinned) is not None  # what reaches the main thread is plain tensors


def test_a_workers_own_lease_never_frees_the_slot():
    ctx = torch.multiprocessing.get_context("fork")
    ring = batch_ring.BatchRing(1, 1, ctx, slot_bytes=1024)
    assert ring._free[0].acquire(block=False)
    sent = batch_ring.Lease(ring.id, 0, 1)  # as a worker makes it: the receiver frees the slot
    del sent
    assert not ring._free[0].acquire(block=False)


def test_the_transport_is_a_config_key():
    from up_trainer.config.schema import SCHEMAS

    assert SCHEMAS["dataset"]["worker_transport"].default == "ring"
