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
