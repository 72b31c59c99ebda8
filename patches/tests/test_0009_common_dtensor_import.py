"""0009: PyTorch's DTensor test utilities import on a host whose PrivateUse1 accelerator has no
default c10d backend (pytorch/pytorch#172803).

torch_hal registers its c10d backend ("torch_hal") for the device when it loads; the first test
removes that registration before the import, which is the situation of any PrivateUse1 backend
without a c10d backend of its own (or of torch_hal without torch.distributed support).
"""

import subprocess
import sys

CODE = """
import sys
import torch.distributed as dist
if sys.argv[1] == "unregistered":
    dist.Backend.default_device_backend_map.pop(sys.argv[2], None)
import torch.testing._internal.distributed._tensor.common_dtensor as c
print(c.DEVICE_TYPE, c.PG_BACKEND)
"""


def _import(mode, dev):
    r = subprocess.run([sys.executable, "-c", CODE, mode, dev], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_import_without_a_default_backend_for_the_device(dev):
    assert _import("unregistered", dev) == [dev, "gloo"]


def test_import_uses_the_registered_backend(dev):
    import torch.distributed as dist

    expected = dist.Backend.default_device_backend_map.get(dev, "gloo")
    assert _import("registered", dev) == [dev, expected]
