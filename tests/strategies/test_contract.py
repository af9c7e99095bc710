"""The strategy contract (hpcdgnn/strategies/base.py): a small, fixed set of public methods, and every registered
strategy generic over one batch type."""

import inspect
import typing

from hpcdgnn.strategies import available_strategies, get_strategy
from hpcdgnn.strategies.base import Batch, EventBatch, FullBatch, SampleBatch, Strategy

CONTRACT = {"make_plan", "setup", "pretraining", "attach_optimizer", "batches", "step", "sync_gradients", "evaluate",
            "report", "usage", "shape", "state_dict", "load_state_dict", "rebalanced_plan", "close",
            # before the plan, on rank 0: the job's checks (at P, on the dataset's sizes), and what the planner
            # prices or resolves
            "check_job", "check_data", "variants", "smaller", "resolve",
            # the footprint check's terms a strategy adds to its regime's (a chunk plan's appearance map)
            "footprint",
            # what the planner's cost leaves out (its prediction's notes); what `check` refuses that the set-up
            # refuses only once it has read the data (hybrid's closure over strategy.max_cache_mb)
            "unpriced", "check_reads",
            # `check --ranks-per-node`: ranks that must share a node (TGN's memory groups) and would not
            "check_nodes",
            # whether a checkpoint's per-rank state binds embed/predict to the run's own P and options
            "keeps_rank_state",
            # whether a pre-emption may stop an epoch between its batches (train/loop.py's BatchStop), and whether
            # it may checkpoint there (training batches; the evaluation pass) instead of abandoning the epoch
            "stops_between_batches", "resumes_between_batches", "resumes_evaluation"}


def _public_methods(cls) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(getattr(cls, n))
            and not isinstance(v, type)}


def test_the_base_class_is_the_contract_and_nothing_more():
    assert _public_methods(Strategy) == CONTRACT


def _batch_type(cls) -> type:
    """The B of the ``Strategy[B]`` the class derives from."""
    for klass in inspect.getmro(cls):
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Strategy:
                return typing.get_args(base)[0]
    raise AssertionError(f"{cls.__name__} derives from no Strategy[B]")


def test_every_strategy_names_its_batch_type():
    """Every strategy that trains (``auto`` resolves to one of them before anything trains)."""
    kinds = {name: _batch_type(get_strategy(name)) for name in available_strategies()
             if not get_strategy(name).picks_another}
    assert all(issubclass(b, Batch) for b in kinds.values()), kinds
    assert {kinds[n] for n in ("snapshot", "pss", "vertex", "chunk", "grid")} == {FullBatch}
    assert kinds["sequences"] is kinds["hybrid"] is SampleBatch and kinds["memory"] is EventBatch
    # full_batch (the footprint's and the exactness tests' question) follows from the batch type
    assert all(get_strategy(n).full_batch == (b is FullBatch) for n, b in kinds.items())
