"""hpcdgnn.metrics.log: rank 0's INFO lines, every rank's warnings, and the set-up's lines held for the start line."""

from __future__ import annotations

import pytest

from hpcdgnn.metrics.log import HeldLines, configure_logging


def test_held_lines_follow_the_start_line_and_warnings_are_not_held(capsys):
    log = configure_logging(0, 2)
    with HeldLines(log) as held:
        log.info("detail 1")
        log.warning("careful")
        log.info("detail 2")
        assert capsys.readouterr().out == "[rank 0] careful\n"
        held.release("start", "run directory")
        log.info("epoch 1")
    assert capsys.readouterr().out == "start\nrun directory\ndetail 1\ndetail 2\nepoch 1\n"


def test_held_lines_are_printed_when_the_set_up_fails(capsys):
    log = configure_logging(0, 1)
    with pytest.raises(RuntimeError), HeldLines(log):
        log.info("read the shards")
        raise RuntimeError("bad shard")
    log.info("after")
    assert capsys.readouterr().out == "read the shards\nafter\n"


def test_only_rank_0_prints_held_lines(capsys):
    log = configure_logging(1, 2)
    with HeldLines(log) as held:
        log.info("detail")
        held.release("start")
    assert capsys.readouterr().out == ""
    configure_logging(0, 1)


def test_pytest_s_log_capture_on_the_logger_is_not_taken_for_a_caller_s_handler(capsys):
    """pytest ≥ 9.2 attaches its capture handler to every non-propagating logger at each test phase — ours, after
    a first run: a second run's lines still reach stdout, once (not through the root logger too)."""
    import logging

    from _pytest.logging import LogCaptureHandler

    log = configure_logging(0, 1)  # as a first run leaves the logger: not propagating
    capture, root = LogCaptureHandler(), LogCaptureHandler()
    log.addHandler(capture)  # what pytest >= 9.2 does at the next test phase
    logging.getLogger().addHandler(root)
    try:
        configure_logging(0, 1)  # the second run
        log.info("epoch 1")
        assert capsys.readouterr().out == "epoch 1\n"
        assert [r.getMessage() for r in capture.records] == ["epoch 1"] and root.records == []
    finally:
        log.removeHandler(capture)
        logging.getLogger().removeHandler(root)
    configure_logging(0, 1)


def test_a_resume_point_s_batches_read_singular_and_plural():
    """The resume lines ("resumed from ... after epoch 3 and 1 batch of epoch 4", the done line's, the static node
    memory's) said "1 batches"."""
    from hpcdgnn.metrics.log import batches_into

    assert batches_into(3, 1) == " and 1 batch of epoch 4"
    assert batches_into(0, 2) == " and 2 batches of epoch 1"
    assert batches_into(5, 0) == ""
