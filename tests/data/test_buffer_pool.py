"""The model-input conversion's reused float buffers (data/buffer_pool.py): a storage is handed
out again only when no tensor holds it, in the requested layout, and converting through it
gives the bits a fresh conversion gives."""
import torch

from up_trainer.data import buffer_pool
from up_trainer.data.model_input import ModelInput


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


def test_a_free_buffer_is_reused_and_a_held_one_is_not():
    buffer_pool.clear()
    image = torch.zeros(3, 40, 50, dtype=torch.uint8)
    first = buffer_pool.empty_like(image)
    ptr = _storage_ptr(first)
    second = buffer_pool.empty_like(image)  # first is still alive: another storage
    assert _storage_ptr(second) != ptr
    view = first[1]  # a view keeps the storage busy after its base is gone
    del first
    assert _storage_ptr(buffer_pool.empty_like(image)) not in (ptr, _storage_ptr(second))
    del view
    reused = buffer_pool.empty_like(image)
    assert _storage_ptr(reused) == ptr
    assert reused.shape == image.shape and reused.dtype == torch.float32


def test_layout_and_smaller_images_in_larger_buffers():
    buffer_pool.clear()
    big = buffer_pool.empty_like(torch.zeros(3, 64, 64, dtype=torch.uint8))
    ptr = _storage_ptr(big)
    del big
    channels_last = torch.zeros(32, 48, 3, dtype=torch.uint8).permute(2, 0, 1)
    out = buffer_pool.empty_like(channels_last)
    assert _storage_ptr(out) == ptr and out.stride() == (1, 48 * 3, 3)
    # a crop (not dense) gets a dense tensor of the same shape, channels-last for a crop of
    # channels-last memory
    sliced = torch.zeros(3, 64, 64, dtype=torch.uint8)[:, ::2]
    assert buffer_pool.empty_like(sliced).is_contiguous() and buffer_pool.empty_like(sliced).shape == sliced.shape
    crop = torch.zeros(64, 64, 3, dtype=torch.uint8).permute(2, 0, 1)[:, 4:20, 8:40]
    assert buffer_pool.empty_like(crop).stride() == (1, 32 * 3, 3)


def test_conversion_through_reused_buffers_matches_a_fresh_one():
    buffer_pool.clear()
    g = torch.Generator().manual_seed(0)
    convert = ModelInput(1 / 255, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    for _ in range(4):  # later rounds write into the buffers earlier rounds left
        batch = torch.randint(0, 256, (3, 3, 20, 30), dtype=torch.uint8, generator=g)
        images = [torch.randint(0, 256, (3, 17, 23), dtype=torch.uint8, generator=g) for _ in range(2)]
        expected = (batch.to(torch.float32) / 255 - torch.tensor(convert.mean).view(3, 1, 1)) / \
            torch.tensor(convert.std).view(3, 1, 1)
        assert torch.equal(convert(batch), expected)
        for image, converted in zip(images, ModelInput()(images)):
            assert torch.equal(converted, image.to(torch.float32).div_(255.0))


def test_a_buffer_sent_to_another_process_is_never_reused():
    """A DataLoader worker moves a sample's storage to shared memory to send it; the main
    process may still read those pages after the worker dropped the tensor."""
    buffer_pool.clear()
    image = torch.zeros(3, 8, 8, dtype=torch.uint8)
    sent = buffer_pool.empty_like(image)
    ptr = _storage_ptr(sent.share_memory_())
    del sent
    assert _storage_ptr(buffer_pool.empty_like(image)) != ptr


def test_idle_buffers_beyond_the_byte_budget_are_let_go(monkeypatch):
    buffer_pool.clear()
    monkeypatch.setattr(buffer_pool, "MAX_BYTES", 3 * 4 * 100)
    for n in (100, 101, 102, 103):  # each larger than the last: none fits the next request
        buffer_pool.empty((n,), torch.float32)
    assert sum(s.nbytes() for s in buffer_pool._free) <= 3 * 4 * 100 + 4 * 103
    buffer_pool.clear()
