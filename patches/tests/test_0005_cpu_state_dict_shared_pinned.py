"""0005: _create_cpu_state_dict(pin_memory=True, share_memory=True) works off CUDA."""

import warnings

import torch
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict


def test_shared_pinned_cpu_state_dict(dev):
    sd = {"w": torch.randn(64, 32, device=dev), "b": torch.randn(32, device=dev),
          "step": torch.tensor(3.0, device=dev)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu_sd = _create_cpu_state_dict(sd, pin_memory=True, share_memory=True)
    assert {k: v.device.type for k, v in cpu_sd.items()} == dict.fromkeys(sd, "cpu")
    assert cpu_sd["w"].is_shared() and cpu_sd["b"].is_shared()
    assert any("pageable" in str(w.message) for w in caught)
    _copy_state_dict(sd, cpu_sd)
    for k in sd:
        torch.testing.assert_close(cpu_sd[k], sd[k].cpu())


def test_pinned_only_is_unchanged(dev):
    cpu_sd = _create_cpu_state_dict({"w": torch.randn(8, device=dev)}, pin_memory=True)
    assert cpu_sd["w"].is_pinned()
