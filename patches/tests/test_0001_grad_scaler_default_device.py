"""0001: torch.amp.GradScaler() and ShardedGradScaler() default to the current accelerator."""

import warnings

import torch


def _train_step(scaler, dev):
    model = torch.nn.Linear(8, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.autocast(device_type=dev, dtype=torch.float16):
        loss = model(torch.randn(16, 8, device=dev)).float().pow(2).mean()
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(opt)
    scaler.update()
    return loss, scaled


def test_grad_scaler_without_device_scales_on_the_accelerator(dev):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = torch.amp.GradScaler()
    assert not [w for w in caught if "not available" in str(w.message)], caught
    assert scaler.is_enabled()
    loss, scaled = _train_step(scaler, dev)
    assert scaled.device.type == dev
    torch.testing.assert_close(scaled, loss * 2.0**16)
    assert scaler.get_scale() == 2.0**16


def test_sharded_grad_scaler_without_device(dev):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    scaler = ShardedGradScaler()
    assert scaler.is_enabled()
    assert scaler._device == dev


def test_explicit_devices_are_unchanged(dev):
    assert torch.amp.GradScaler(dev).is_enabled()
    if not torch.cuda.is_available():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert not torch.amp.GradScaler("cuda").is_enabled()
