/* How far apart two cores are now: the round trip of one cache line between a thread on CPU A and one on CPU B.

   On a virtual machine the host may run the guest's cores close together (one core complex, sharing a cache)
   or far apart, and move them between the two for minutes at a time; how fast MPI ranks pass bytes follows
   (perf/results/README.md, thirty-second session: 55-85 ns or 310-390 ns here, one unchunked exchange of
   perf/bench_progress.py 13 or 33 ms). Run it before and after a benchmark round, not during one: it spins
   both cores.

       gcc -O2 -pthread -o /tmp/core_pingpong perf/vm/core_pingpong.c
       /tmp/core_pingpong [A B [round trips]]          (default: CPUs 0 and 1, 200000 round trips)
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic long flag __attribute__((aligned(64)));
static long trips = 200000;
static int cpu_b = 1;

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *echo(void *unused) {
    (void)unused;
    if (pin(cpu_b) != 0) {
        fprintf(stderr, "core_pingpong: cannot run on CPU %d\n", cpu_b);
        exit(2);
    }
    for (long i = 0; i < trips; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int cpu_a = argc > 2 ? atoi(argv[1]) : 0;
    cpu_b = argc > 2 ? atoi(argv[2]) : 1;
    trips = argc > 3 ? atol(argv[3]) : trips;
    if (pin(cpu_a) != 0) {
        fprintf(stderr, "core_pingpong: cannot run on CPU %d\n", cpu_a);
        return 2;
    }
    pthread_t t;
    pthread_create(&t, NULL, echo, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < trips; i++) {
        atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / trips;
    printf("CPUs %d-%d: round trip %.0f ns\n", cpu_a, cpu_b, ns);
    return 0;
}
