"""Streams and events of the torch_hal device, on torch.Stream / torch.Event.

The native side (the DeviceGuardImplInterface) maps stream ids to HAL streams: id 0 is a
device's default stream, the others come from two lazily created pools (low and high priority)
handed out round-robin, as CUDA does. Events are the HAL's versioned events, created when first
recorded.
"""

import torch

from . import _C
from ._utils import _device, _get_device_index

__all__ = ["Stream", "Event"]


class Stream(torch.Stream):
    """A stream of the device: an in-order queue of work.

    Args:
        device: the device (default: the current device).
        priority: 0 (default) or negative for a high-priority stream.
    """

    def __new__(cls, device=None, priority=0, **kwargs):
        # torch.Stream's own form, used to wrap an existing stream id.
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        index = _get_device_index(device, optional=True)
        return super().__new__(cls, device=_device(index), priority=priority)

    @classmethod
    def _wrap(cls, stream):
        """The same stream as a torch_hal Stream (torch.accelerator returns plain torch.Stream)."""
        return cls(stream_id=stream.stream_id, device_index=stream.device_index,
                   device_type=stream.device_type)

    @property
    def priority(self):
        """The HAL priority of the stream (0 is the default; lower numbers run first)."""
        return _C._stream_priority(self.device_index, self.stream_id)

    @property
    def hal_stream(self):
        """The address of the underlying hal_stream_t, for native code."""
        return _C._stream_native_handle(self.device_index, self.stream_id)

    def __eq__(self, other):
        if not isinstance(other, torch.Stream):
            return NotImplemented
        return (self.stream_id, self.device_index, self.device_type) == (
            other.stream_id, other.device_index, other.device_type)

    def __hash__(self):
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self):
        return f"<torch_hal.Stream device={self.device} stream_id={self.stream_id}>"


class Event(torch.Event):
    """An event of the device (the torch.cuda.Event signature).

    Args:
        enable_timing: record timestamps so that elapsed_time() works.
        blocking, interprocess: accepted for compatibility; not supported by torch.Event.
        device: the device (default: the current device).
    """

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, device=None):
        index = _get_device_index(device, optional=True)
        return super().__new__(cls, device=_device(index), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def record(self, stream=None):
        """Records the event on ``stream`` (default: the current stream of its device)."""
        if stream is None:
            stream = torch.accelerator.current_stream(self.device.index)
        super().record(stream)

    def wait(self, stream=None):
        """Makes ``stream`` (default: the current stream) wait for the event."""
        if stream is None:
            stream = torch.accelerator.current_stream(self.device.index)
        super().wait(stream)

    def elapsed_time(self, end_event):
        """Milliseconds from this event to ``end_event`` (both recorded with enable_timing)."""
        return _C._event_elapsed_time(self, end_event)

    def __repr__(self):
        return f"<torch_hal.Event device={self.device}>"
