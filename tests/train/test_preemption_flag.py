"""The pre-emption flag's escalation (hpcdgnn/preemption.py): only a repeated SIGINT/SIGTERM stops at once; a
scheduler's SIGUSR1 warning followed by its SIGTERM must still checkpoint (the repeat itself: test_sigterm.py)."""

from __future__ import annotations

import signal

import pytest

from hpcdgnn.preemption import PreemptionFlag


@pytest.mark.parametrize("first", [signal.SIGUSR1])
@pytest.mark.parametrize("then", [signal.SIGTERM, signal.SIGINT])
def test_a_warning_then_the_schedulers_signal_is_still_a_preemption(first, then):
    flag = PreemptionFlag(at_once=True)
    flag.handle(first, None)
    flag.handle(then, None)  # os._exit here would end this test process
    assert flag.raised and flag.name == then.name


def test_a_library_callers_second_interrupt_raises_keyboard_interrupt():
    flag = PreemptionFlag(at_once=False)
    flag.handle(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        flag.handle(signal.SIGINT, None)
    flag = PreemptionFlag(at_once=False)
    flag.handle(signal.SIGTERM, None)
    flag.handle(signal.SIGTERM, None)  # recorded, nothing else
    assert flag.name == "SIGTERM"
