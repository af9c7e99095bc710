"""Adam (Kingma & Ba, ICLR 2015), the optimiser every strategy steps, as ``torch.optim.Adam(fused=True)``
computes it.

Not ``torch.optim.Adam`` itself: building any ``torch.optim.Optimizer`` imports ``torch._dynamo``, costing every
rank about an ``import torch`` of start-up CPU and tens of MiB. The arithmetic is torch's fused kernel
(``torch._fused_adam_``, CPU and CUDA), per (device, dtype) group, bit for bit (``tests/train/test_optim.py``)::

    m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²
    p ← p − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)

with t a float32 step count per parameter on its device; ``state_dict`` has torch's layout. Fused rather than
the ``_foreach_*`` path (torch's default): one pass over each parameter and its moments instead of seven,
agreeing with it to rounding. Each element's update reads only its own values, so a parameter updates alike
whatever its size or slicing (P-invariance keeps to the bit).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from hpcdgnn.config.schema import ADAM_BETAS

__all__ = ["Adam"]


class Adam:
    """Adam over one parameter group (β = :data:`~hpcdgnn.config.schema.ADAM_BETAS`, ε = 1e-8)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = ADAM_BETAS,
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam: no parameters to optimise")
        if len({id(p) for p in self.params}) != len(self.params):  # torch would share one state and step it twice
            raise ValueError("Adam: a parameter is listed twice")
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.state: dict[int, dict[str, torch.Tensor]] = {}  # by index into params, as torch's

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (None, as torch's default)."""
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:  # as torch: a gradient that is a view cannot be detached in place
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if i not in self.state:  # lazily, as torch: the fused kernel's float32 step count on the device
                self.state[i] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                 "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                 "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            groups.setdefault((p.device, p.dtype), []).append(i)
        for index in groups.values():
            states = [self.state[i] for i in index]
            steps = [s["step"] for s in states]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_([self.params[i] for i in index], [self.params[i].grad for i in index],
                               [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [], steps,
                               amsgrad=False, lr=self.lr, beta1=self.betas[0], beta2=self.betas[1],
                               weight_decay=0.0, eps=self.eps, maximize=False)

    def _group(self) -> dict[str, Any]:
        """Torch's ``param_groups[0]`` entry for these settings (its flags, so a torch optimizer loads it)."""
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0, "amsgrad": False,
                "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": True,
                "decoupled_weight_decay": False, "params": list(range(len(self.params)))}

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {i: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": [...]}``: torch's layout."""
        return {"state": {i: dict(s) for i, s in sorted(self.state.items())}, "param_groups": [self._group()]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take a :meth:`state_dict` (or ``torch.optim.Adam``'s) of the same parameters.

        Raises:
            ValueError: other groups, parameters, moment shapes or Adam settings.
        """
        groups = state_dict.get("param_groups")
        if not isinstance(groups, list) or len(groups) != 1 or len(groups[0].get("params", ())) != len(self.params):
            raise ValueError("loaded optimizer state does not match this model's parameters (groups or count)")
        group, mine = groups[0], self._group()
        for key in ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"):
            if key in group and _plain(group[key]) != _plain(mine[key]):
                raise ValueError(f"loaded optimizer state has {key} = {group[key]!r}, this job {mine[key]!r}")
        position = {pid: k for k, pid in enumerate(group["params"])}
        state: dict[int, dict[str, torch.Tensor]] = {}
        for pid, saved in state_dict.get("state", {}).items():
            if pid not in position:
                raise ValueError(f"loaded optimizer state names parameter {pid!r}, which no group holds")
            i = position[pid]
            p = self.params[i]
            entry = {"step": torch.as_tensor(saved["step"], dtype=torch.float32).detach().to(p.device, copy=True)}
            for key in ("exp_avg", "exp_avg_sq"):
                t = saved[key]
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"loaded optimizer state of parameter {i} has shape {tuple(t.shape)}, "
                                     f"the parameter {tuple(p.shape)}")
                entry[key] = t.detach().to(device=p.device, dtype=p.dtype).clone()
            state[i] = entry
        self.state = state


def _plain(v: Any) -> Any:
    """A group setting as compared: tuples and lists alike (a YAML round trip may turn one into the other)."""
    return tuple(v) if isinstance(v, (list, tuple)) else v
