"""0006: checkpoint staging pins host memory for the current accelerator."""

import warnings

import torch
from torch.distributed.checkpoint._state_dict_stager import StateDictStager
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions


def _state_dict(dev):
    return {"w": torch.randn(64, 32, device=dev), "b": torch.randn(32, device=dev),
            "nested": {"m": torch.randn(4, 4, device=dev)}}


def test_stager_pins_staged_memory(dev):
    sd = _state_dict(dev)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stager = StateDictStager(pin_memory=True)
        staged = stager.stage(sd)
    assert not [w for w in caught if "pin_memory" in str(w.message)], caught
    assert stager.pin_memory
    for got, ref in ((staged["w"], sd["w"]), (staged["b"], sd["b"]),
                     (staged["nested"]["m"], sd["nested"]["m"])):
        assert got.device.type == "cpu" and got.is_pinned()
        torch.testing.assert_close(got, ref.cpu())


def test_default_stager_pinned_non_blocking(dev):
    sd = _state_dict(dev)
    stager = DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False,
                                          use_async_staging=False, use_non_blocking_copy=True))
    try:
        staged = stager.stage(sd)
        stager.synchronize_staging()
    finally:
        stager.close()
    assert staged["w"].is_pinned()
    torch.testing.assert_close(staged["w"], sd["w"].cpu())


def test_stager_pinned_and_shared(dev):
    sd = _state_dict(dev)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        staged = StateDictStager(pin_memory=True, share_memory=True).stage(sd)
    assert staged["w"].is_shared()
    torch.testing.assert_close(staged["w"], sd["w"].cpu())
