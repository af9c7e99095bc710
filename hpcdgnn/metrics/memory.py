"""An allocator-independent account of the bytes autograd holds for the backward pass: ``peak`` is the
activation high-water mark that checkpointing (S2) cuts, unlike RSS or CUDA-only counters."""

from __future__ import annotations

import torch

__all__ = ["SavedTensorMeter"]

_PARAMETER, _STRIDED = torch.nn.Parameter, torch.strided


class _Holder:
    """Keeps a saved tensor; releases its storage's bytes from the meter when the graph drops it."""

    __slots__ = ("tensor", "key", "meter")

    def __init__(self, tensor: torch.Tensor, key: int, meter: SavedTensorMeter) -> None:
        self.tensor, self.key, self.meter = tensor, key, meter

    def __del__(self) -> None:
        self.meter._release(self.key)


class SavedTensorMeter:
    """Context manager measuring current and peak bytes of tensors saved for backward."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage pointer -> [references, bytes]
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor):
        # parameters are not activations; sparse inputs are resident data. The class test first: it runs for
        # every saved tensor of every step, and isinstance(t, Parameter) is a Python-level check
        cls = t.__class__
        if (cls is _PARAMETER or (cls is not torch.Tensor and isinstance(t, _PARAMETER)) or t.layout is not _STRIDED
                or not t.numel()):
            return t
        storage = t.untyped_storage()
        key = storage.data_ptr()
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [1, storage.nbytes()]
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        else:
            entry[0] += 1
        return _Holder(t, key, self)

    @staticmethod
    def _unpack(h):
        return h.tensor if isinstance(h, _Holder) else h

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self._refs[key]

    def reset_peak(self) -> None:
        """Start a new high-water mark from the current level."""
        self.peak = self.current

    def __enter__(self) -> SavedTensorMeter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
