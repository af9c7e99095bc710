"""Strategy registry: YAML ``strategy.name`` -> class (torchtitan's ``register_train_spec``)."""

from __future__ import annotations

from collections.abc import Callable

from hpcdgnn.strategies.base import Strategy

__all__ = ["register_strategy", "get_strategy", "available_strategies"]

_REGISTRY: dict[str, type[Strategy]] = {}


def register_strategy(name: str) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator registering a strategy under ``name``; duplicate names are refused."""

    def deco(cls: type[Strategy]) -> type[Strategy]:
        from hpcdgnn.regimes import names

        if name not in names("strategy"):  # the config must know a strategy's options to parse them strictly
            raise ValueError(f"strategy {name!r} is in no regime's strategies (hpcdgnn.regimes)")
        if name in _REGISTRY:
            raise ValueError(f"strategy {name!r} registered twice ({_REGISTRY[name].__name__}, {cls.__name__})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def available_strategies() -> list[str]:
    """Registered names, sorted."""
    return sorted(_REGISTRY)


def get_strategy(name: str) -> type[Strategy]:
    """The class registered as ``name`` (config validation has already checked it exists)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"strategy.name: unknown {name!r}; choose from {', '.join(available_strategies())}") from None
