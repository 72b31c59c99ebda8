"""0010: DLPack exchange of tensors on a renamed PrivateUse1 device."""

import torch
from torch.utils.dlpack import DLDeviceType


def test_dlpack_device(dev):
    t = torch.arange(6.0, device=f"{dev}:0")
    assert t.__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)


def test_from_dlpack_roundtrip_shares_memory(dev):
    t = torch.arange(6.0, device=dev).reshape(2, 3)
    u = torch.from_dlpack(t)
    assert u.device == t.device
    assert u.data_ptr() == t.data_ptr()
    torch.testing.assert_close(u.cpu(), t.cpu())
