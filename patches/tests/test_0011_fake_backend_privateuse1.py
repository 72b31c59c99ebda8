"""0011: the "fake" process-group backend also serves the PrivateUse1 device."""

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore


@pytest.fixture
def fake_world():
    dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
    yield
    dist.destroy_process_group()


def test_collective_on_the_device(fake_world, dev):
    assert dev in str(dist.get_backend_config())
    t = torch.ones(8, device=dev)
    dist.all_reduce(t)
    assert t.device.type == dev


def test_dtensor_on_a_fake_mesh(fake_world, dev):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh(dev, (4,))
    d = distribute_tensor(torch.randn(8, 4, device=dev), mesh, [Shard(0)])
    assert d.to_local().shape == (2, 4)
    assert d.to_local().device.type == dev


def test_no_privateuse1_entry_without_a_registered_backend():
    # Without a PrivateUse1 backend (torch_hal not autoloaded) the fake backend's devices are
    # the built-in ones: no "privateuseone" entry.
    import os
    import subprocess
    import sys

    code = ("import torch, torch.distributed as dist\n"
            "from torch.distributed.distributed_c10d import BackendConfig\n"
            "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'\n"
            "print(sorted(BackendConfig(dist.Backend('fake')).get_device_backend_map()))\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "privateuseone" not in proc.stdout and "cpu" in proc.stdout, proc.stdout
