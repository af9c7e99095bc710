"""H3: the hybrid batch size adjuster (DynaHB §5.1, Defs. 4–6, Eq. 3).

``fixed`` keeps one action of SS × VS (Def. 5); ``random`` draws one per batch from (seed, epoch, batch);
``dqn`` learns the choice online. The DQN's state is the loss reduction (Def. 4), taken relative to the
previous loss so that it does not depend on the loss's scale: s = (loss_l − loss_c) / |loss_l|, clipped to
[−1, 1]. Its reward (Eq. 3) is::

    R = (t_l − t_c) / t_l + (Δloss_c − Δloss_l) / Δloss_c,

each term clipped to [−1, 1], the loss term 0 while |Δloss_c| is below 1e-12. t is the step's time: the
slowest rank's measured seconds (``reward_time: measured``, the paper's), or its Def. 2 load (``work``: the
targets' Alg. 1 loads × N_S / T; reproducible). The network is an MLP 1 → 32 → 32 → |A| (ReLU), trained after
every decision on a minibatch of up to 32 transitions from a replay buffer of the last 1,000, target
r + γ·max Q(s′) (no separate target network: the action space is small and the state one number), Adam at
``lr``; ε-greedy with ε decayed by ``epsilon_decay`` to ``epsilon_min`` per decision. Every rank runs the same
seeded network on the same all-reduced inputs, so all choose alike without a broadcast.
"""

from __future__ import annotations

import copy
from collections import deque

import numpy as np
import torch
from torch import nn

__all__ = ["BatchAdjuster"]

#: transitions kept, and sampled per update
REPLAY, MINIBATCH = 1000, 32


def _clip(x: float) -> float:
    return float(min(1.0, max(-1.0, x)))


class BatchAdjuster:
    """Chooses the action (index into SS × VS) of each hybrid batch.

    Args:
        cfg: ``strategy.adjuster`` (:class:`~hpcdgnn.config.schema.AdjusterConfig`).
        num_actions: |A|.
        start: the first action.
        seed: ``train.seed``.
    """

    def __init__(self, cfg, num_actions: int, start: int, seed: int) -> None:
        self.cfg, self.num_actions, self.seed = cfg, num_actions, seed
        self.action = start
        self.decisions = 0
        if cfg.kind != "dqn":
            return
        gen = torch.Generator().manual_seed(seed * 7919 + 17)
        self.net = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                 nn.Linear(32, num_actions)).double()
        with torch.no_grad():  # seeded here, not by the global generator the model was built with
            for p in self.net.parameters():
                p.uniform_(-0.5 / p.shape[-1] ** 0.5, 0.5 / p.shape[-1] ** 0.5, generator=gen)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.rng = np.random.default_rng([seed, 0xD9])
        self.epsilon = cfg.epsilon
        self.replay: deque = deque(maxlen=REPLAY)
        #: (loss, time, Δloss, state) of the last observation
        self.last: tuple[float, float, float, float] | None = None

    def choose(self, epoch: int, index: int) -> int:
        """The action of batch ``index`` of ``epoch``."""
        if self.cfg.kind == "random":
            rng = np.random.default_rng([self.seed, epoch, index, 0xAC7])
            return int(rng.integers(self.num_actions))
        return self.action

    def observe(self, loss: float, seconds: float) -> None:
        """``dqn``: the loss after the last action and its time (the same on every rank); pick the next action."""
        if self.cfg.kind != "dqn":
            return
        if self.last is None:
            self.last = (loss, seconds, 0.0, 0.0)
            return
        loss_l, time_l, delta_l, state_l = self.last
        delta = loss_l - loss
        state = _clip(delta / abs(loss_l)) if loss_l else 0.0
        reward = _clip((time_l - seconds) / time_l) if time_l > 0 else 0.0
        if abs(delta) >= 1e-12:
            reward += _clip((delta - delta_l) / delta)
        self.replay.append((state_l, self.action, reward, state))
        self._learn()
        self.last = (loss, seconds, delta, state)
        if self.rng.random() < self.epsilon:
            self.action = int(self.rng.integers(self.num_actions))
        else:
            with torch.no_grad():
                self.action = int(self.net(torch.tensor([[state]], dtype=torch.float64)).argmax())
        self.epsilon = max(self.cfg.epsilon_min, self.epsilon * self.cfg.epsilon_decay)
        self.decisions += 1

    def _learn(self) -> None:
        """One Adam step on a replay minibatch: (Q(s, a) − (r + γ max Q(s′)))²."""
        k = min(MINIBATCH, len(self.replay))
        pick = self.rng.choice(len(self.replay), k, replace=False)
        s, a, r, s2 = (torch.tensor(v, dtype=torch.float64) for v in zip(*(self.replay[i] for i in pick),
                                                                           strict=True))
        with torch.no_grad():
            target = r + self.cfg.gamma * self.net(s2.unsqueeze(1)).max(1).values
        q = self.net(s.unsqueeze(1)).gather(1, a.long().unsqueeze(1)).squeeze(1)
        loss = ((q - target) ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def state_dict(self) -> dict:
        """Everything later choices depend on (network, optimizer, replay, ε, RNG, last observation)."""
        out = {"action": self.action, "decisions": self.decisions}
        if self.cfg.kind == "dqn":
            out.update(net=copy.deepcopy(self.net.state_dict()), opt=copy.deepcopy(self.opt.state_dict()),
                       replay=list(self.replay), epsilon=self.epsilon, rng=self.rng.bit_generator.state,
                       last=self.last)
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.action, self.decisions = state["action"], state["decisions"]
        if self.cfg.kind == "dqn":
            self.net.load_state_dict(state["net"])
            self.opt.load_state_dict(state["opt"])
            self.replay = deque(state["replay"], maxlen=REPLAY)
            self.epsilon, self.last = state["epsilon"], state["last"]
            self.rng.bit_generator.state = state["rng"]
