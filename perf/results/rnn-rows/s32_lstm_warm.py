"""Provenance of s32_lstm_warm.log (thirty-second session): why a large graph's first epochs are slow.

torch's LSTM forward and backward over the shapes of CD-GCN's time encoder on gen32k at P = 1, seven times
in one process, with the process's minor page faults after each: under jemalloc the faults (and the extra
time) stop after the second or third pass, once the allocator holds enough freed memory for every pass's
pattern of large blocks; under glibc every pass faults in about 2.6 GB afresh.

    python perf/results/rnn-rows/s32_lstm_warm.py
"""

import resource
import time

import torch


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    T, N, F, H = 64, 32768, 32, 16
    lstm = torch.nn.LSTM(F, H)
    x = torch.randn(T, N, F, requires_grad=True)
    for i in range(7):
        t0 = time.perf_counter()
        y, _ = lstm(x)
        t1 = time.perf_counter()
        y.sum().backward()
        t2 = time.perf_counter()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        print(f"{i}: fwd {t1 - t0:.3f} bwd {t2 - t1:.3f} minflt {faults}", flush=True)


if __name__ == "__main__":
    main()
