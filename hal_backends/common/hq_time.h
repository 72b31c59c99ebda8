/* SPDX-License-Identifier: Apache-2.0 */
/* Backend toolkit: the monotonic clock and the bounded spin that every waiter of the engine
 * (stream workers, synchronize callers, event and slot waiters) tries before it sleeps. */
#ifndef HAL_BACKENDS_COMMON_HQ_TIME_H
#define HAL_BACKENDS_COMMON_HQ_TIME_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. Thread safety: safe. */
static inline uint64_t hq_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* Tells the core a spin-wait is in progress (lets a sibling hyperthread run). */
static inline void hq_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins up to spin_us microseconds until done(arg) holds; returns whether it did (spin_us 0:
 * one check). Waiters spin first because a futex sleep and wake-up costs tens of microseconds,
 * far more than most host-queue tasks take. After the first microsecond the spin yields the
 * CPU between polls, so that when threads outnumber cores the thread being waited for gets to
 * run instead of being starved by the spinner.
 * Thread safety: safe; done must be. */
static inline bool hq_spin_until(bool (*done)(const void *arg), const void *arg, uint32_t spin_us)
{
    if (done(arg))
        return true;
    if (spin_us == 0)
        return false;
    uint64_t start = hq_now_ns();
    uint64_t deadline = start + (uint64_t)spin_us * 1000u;
    uint64_t yield_after = start + 1000u;
    for (;;) {
        for (int i = 0; i < 32; i++) {
            hq_relax();
            if (done(arg))
                return true;
        }
        uint64_t now = hq_now_ns();
        if (now >= deadline)
            return false;
        if (now >= yield_after)
            sched_yield();
    }
}

#endif /* HAL_BACKENDS_COMMON_HQ_TIME_H */
