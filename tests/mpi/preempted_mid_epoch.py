"""Run under mpirun: ``python -m hpcdgnn run`` with a pre-emption signal on one rank during one batch.

Usage: mpirun -np P python tests/mpi/preempted_mid_epoch.py RANK EPOCH BATCH OPTIONS -- ARGS...

Rank RANK sends itself SIGUSR1 (the scheduler's warning) while it trains batch BATCH (0-based) of epoch EPOCH;
the rest is the real command line. OPTIONS, comma-separated (``-``: none): ``hold``: an epoch's start is held in
memory however short the epoch before (``BatchStop.HOLD_AFTER_S`` 0); ``interval=S``: the ranks agree after S
seconds of batches (``BatchStop.INTERVAL_S``; else 0 here, before every batch, so that a test knows where the
epoch ends; a run's default is 1); ``eval``: the signal comes as epoch EPOCH's evaluation pass starts instead,
``eval=B``: before its round (batch) B, after B of them; ``nofit``: no hold fits a node's memory
(``trainer.HOLD_OF_NODE`` 0); ``abandon``: no strategy resumes within an epoch (``Strategy.resumes_between_batches``
and ``resumes_evaluation`` false, the base's default for one that cannot), so a stop abandons the epoch;
``abandon=training``: only between training batches (the evaluation pass still checkpoints where it stops).
"""

import os
import signal
import sys

from mpi4py import MPI

from hpcdgnn.__main__ import main
from hpcdgnn.strategies.registry import available_strategies, get_strategy
from hpcdgnn.train import trainer
from hpcdgnn.train.loop import BatchStop


def _signalling(step, rank: int, epoch: int, index: int):
    def wrapped(self, model, task, batch, scale):
        # not a pre-training phase's batch (TGN's static memory: segment -1), which counts its own epochs
        training = getattr(batch, "segment", 0) != -1
        if MPI.COMM_WORLD.rank == rank and batch.epoch == epoch and batch.index == index and training:
            os.kill(os.getpid(), signal.SIGUSR1)
        return step(self, model, task, batch, scale)
    return wrapped


def _signalling_evaluation(evaluate, rank: int, epoch: int, index: int):
    def wrapped(self, model, task, at, *args, **kwargs):
        if MPI.COMM_WORLD.rank == rank and at == epoch:
            stop = kwargs.get("stop")
            if index == 0 or stop is None:
                os.kill(os.getpid(), signal.SIGUSR1)
            else:  # raised as the ranks are asked before round ``index``

                def signalled(r, stop=stop):
                    if r == index:
                        os.kill(os.getpid(), signal.SIGUSR1)
                    return stop(r)
                kwargs["stop"] = signalled
        return evaluate(self, model, task, at, *args, **kwargs)
    return wrapped


if __name__ == "__main__":
    cut = sys.argv.index("--")
    rank, epoch, index = map(int, sys.argv[1:4])
    BatchStop.INTERVAL_S = 0.0
    options = sys.argv[4].split(",")
    evaluation = None  # the evaluation round the signal comes before
    classes = {get_strategy(name) for name in available_strategies()}
    for option in options:
        if option == "hold":
            BatchStop.HOLD_AFTER_S = 0.0
        elif option == "nofit":
            trainer.HOLD_OF_NODE = 0.0
        elif option.startswith("interval="):
            BatchStop.INTERVAL_S = float(option.partition("=")[2])
        elif option == "eval" or option.startswith("eval="):
            evaluation = int(option.partition("=")[2] or 0)
        elif option in ("abandon", "abandon=training"):
            for cls in classes:
                cls.resumes_between_batches = lambda self, epoch: False
                if option == "abandon":
                    cls.resumes_evaluation = lambda self, epoch: False
    for cls in classes:
        if evaluation is not None:
            cls.evaluate = _signalling_evaluation(cls.evaluate, rank, epoch, evaluation)
        else:
            cls.step = _signalling(cls.step, rank, epoch, index)
    sys.exit(main(sys.argv[cut + 1:]))
