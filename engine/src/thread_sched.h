/*
 * The calling thread's scheduling policy and slice (sched_setattr).
 *
 * Under EEVDF (Linux 6.6 on) a thread that wakes with the default slice
 * waits for the running thread to use up its own before it may preempt
 * it; one that asks for a short slice (its runtime, Linux 6.12 on; older
 * kernels ignore it) preempts at once and runs little before it may be
 * preempted in turn.  A thread that waits for the network and answers in
 * microseconds (a connection's first token, a benchmark client's clock)
 * wants the short one; the engine's compute threads keep the default.
 */
#ifndef PRIVAI_THREAD_SCHED_H
#define PRIVAI_THREAD_SCHED_H

#include <stdint.h>

#define THREAD_SLICE_SHORT_NS 100000ULL /* the smallest slice Linux takes */

/* policy (SCHED_OTHER, SCHED_BATCH) and slice_ns (0: the kernel's
 * default) for the calling thread, its nice value kept; a thread under
 * another policy (real-time, SCHED_IDLE: chosen by whoever started it)
 * keeps it.  0, or -1 with errno. */
int thread_sched_set(int policy, uint64_t slice_ns);

/* For a thread that serves a network peer (thread_sched.c says why): on,
 * woken it waits for a free CPU or the next tick (SCHED_BATCH: a stream's
 * writes past its first); off, it preempts at once (a short slice: a
 * request's parse and first answer).  Asks the kernel only when it
 * differs from what the calling thread last asked.  A hint: 0, or -1
 * with errno where the policy cannot be changed. */
int thread_sched_defer(int on);

#endif
