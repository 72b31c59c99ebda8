/* SPDX-License-Identifier: Apache-2.0 */
/* Failure handling of the host collective engine: the sticky status, bounded waits with
 * backoff, and peer liveness.
 *
 * A wait first spins on the word with a pause instruction: a peer on another core answers in
 * well under a microsecond, and a syscall costs more than that. While every local rank can
 * have a CPU of its own, a rank arriving at a small collective (latency-bound: one cache line
 * to trade) spins ENG_SPIN_LATENCY_NS: a peer that has not arrived yet is then running, or was
 * preempted by another process, and yielding would hand this rank's CPU to other processes for
 * a whole time slice. Other waits (for a peer copying or reducing a block) spin
 * ENG_SPIN_BULK_NS, about what they spun before, so that a preempted peer or the threads
 * feeding the streams get the CPU back sooner. When ranks outnumber CPUs every spin is brief.
 * When the awaited peer last ran on this very CPU, spinning only delays it: the rank yields,
 * or on the small path moves to another CPU (see leave_cpu). After spinning the wait yields
 * the CPU, then sleeps in short steps. Every step checks this rank's abort flag and the
 * awaited peer's failure word; the clock is read once per burst of pauses, and the deadline
 * and the peer's process are only checked there, so the fast path makes no syscall. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hal/src/comm/engine_impl.h"
#include "hal/src/core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ENG_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define ENG_PAUSE() __asm__ __volatile__("yield" ::: "memory")
#else
#define ENG_PAUSE() ((void)0)
#endif

/* Pauses between looks at the clock (a pause takes 10 to 150 ns, by CPU); spinning budgets
 * (see the top of the file); the yielding phase before sleeps, sleep bounds, and how often a
 * peer's process is checked. */
#define ENG_SPIN_BURST       16u
#define ENG_SPIN_LATENCY_NS  (100u * 1000u)
#define ENG_SPIN_BULK_NS     (20u * 1000u)
#define ENG_SPIN_SHARED_NS   (2u * 1000u)
#define ENG_MOVE_INTERVAL_NS (1000u * 1000u)
#define ENG_YIELD_NS         (2u * 1000u * 1000u)
#define ENG_SLEEP_MIN_NS     (20u * 1000u)
#define ENG_SLEEP_MAX_NS     (500u * 1000u)
#define ENG_LIVENESS_NS      (5u * 1000u * 1000u)

uint64_t eng_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

hal_status_t eng_fail(hal_engine_comm_t *c, hal_status_t st, const char *call, const char *fmt, ...)
{
    char detail[ENG_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    uint32_t expected = HAL_OK;
    if (__atomic_compare_exchange_n(&c->status, &expected, (uint32_t)st, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&c->message_lock);
        snprintf(c->message, sizeof(c->message), "%.40s: %.440s", call, detail);
        pthread_mutex_unlock(&c->message_lock);
        /* Peers waiting on this rank stop at once instead of running into their timeout. */
        eng_publish_state(c, (uint64_t)st);
        return hal_error(st, "hal", call, "%s", detail);
    }
    /* An earlier failure (or an abort) won: report it, it is what the communicator is now. */
    return eng_sticky(c, call);
}

void eng_publish_state(hal_engine_comm_t *c, uint64_t state)
{
    if (!c->me)
        return;
    uint64_t zero = 0;
    if (__atomic_load_n(&c->me->state.v, __ATOMIC_ACQUIRE))
        return;
    __atomic_store_n(&c->me->state.seq, __atomic_load_n(&c->seq_done, __ATOMIC_ACQUIRE) + 1,
                     __ATOMIC_RELAXED);
    __atomic_compare_exchange_n(&c->me->state.v, &zero, state, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
}

uint64_t eng_peer_failed_in(const hal_engine_comm_t *c, int p, uint64_t seq)
{
    const eng_state_t *s = &c->peers[p].ctrl->state;
    uint64_t v = __atomic_load_n(&s->v, __ATOMIC_SEQ_CST);
    if (!v || __atomic_load_n(&s->seq, __ATOMIC_RELAXED) > seq)
        return 0;
    return v;
}

hal_status_t eng_sticky(hal_engine_comm_t *c, const char *call)
{
    hal_status_t st = (hal_status_t)__atomic_load_n(&c->status, __ATOMIC_ACQUIRE);
    if (st == HAL_OK)
        return HAL_OK;
    char message[ENG_MESSAGE_MAX];
    pthread_mutex_lock(&c->message_lock);
    memcpy(message, c->message, sizeof(message));
    pthread_mutex_unlock(&c->message_lock);
    return hal_error(st, "hal", call, "the communicator failed earlier and is unusable (%s)",
                     message);
}

bool eng_process_gone(int pid, int pidfd)
{
    if (pidfd >= 0) {
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        return poll(&p, 1, 0) > 0;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    /* An exited child its parent has not reaped yet still answers kill(): read its state. */
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

hal_status_t eng_fail_peer(hal_engine_comm_t *c, const eng_backoff_t *b, const char *call,
                           const char *what)
{
    int peer = b->failed_peer;
    if (b->peer_died)
        return eng_fail(c, HAL_ERROR_REMOTE, call,
                        "rank %d (pid %d) died while this rank waited for %s", peer,
                        c->peers[peer].pid, what);
    if (b->peer_state == ENG_STATE_GONE)
        return eng_fail(c, HAL_ERROR_REMOTE, call,
                        "rank %d destroyed its communicator while this rank waited for %s", peer,
                        what);
    return eng_fail(c, HAL_ERROR_REMOTE, call, "rank %d failed (%s) while this rank waited for %s",
                    peer, hal_status_string((hal_status_t)b->peer_state), what);
}

hal_status_t eng_check_peer(hal_engine_comm_t *c, eng_backoff_t *b, int peer)
{
    if (c->tcp || peer < 0 || peer == c->rank)
        return HAL_OK;
    const eng_peer_t *p = &c->peers[peer];
    uint64_t state = __atomic_load_n(&p->ctrl->state.v, __ATOMIC_ACQUIRE);
    bool died = false;
    if (!state && p->watch && b->spun && eng_now_ns() >= b->next_check_ns)
        died = eng_process_gone(p->pid, p->pidfd);
    if (!state && !died)
        return HAL_OK;
    b->failed_peer = peer;
    b->peer_state = state;
    b->peer_died = died;
    return ENG_PEER_STOPPED;
}

/* CPUs this process may run on. */
static long usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

void eng_choose_spin(hal_engine_comm_t *c)
{
    c->cpu_each = usable_cpus() >= c->nranks;
}

void eng_note_cpu(hal_engine_comm_t *c)
{
    int cpu = sched_getcpu();
    if (!c->me || cpu < 0)
        return;
    uint64_t v = (uint64_t)cpu + 1;
    if (__atomic_load_n(&c->me->cpu.v, __ATOMIC_RELAXED) != v)
        __atomic_store_n(&c->me->cpu.v, v, __ATOMIC_RELAXED);
}

/* Whether the awaited peer last ran on the CPU this thread runs on: then it is not running
 * while this thread spins. A stale answer (it moved since) costs one yield or move. */
static bool shares_cpu(const hal_engine_comm_t *c, int peer)
{
    if (c->tcp || peer < 0 || peer == c->rank)
        return false;
    int cpu = sched_getcpu();
    return cpu >= 0 &&
           __atomic_load_n(&c->peers[peer].ctrl->cpu.v, __ATOMIC_RELAXED) == (uint64_t)cpu + 1;
}

/* Moves the calling thread off its CPU, which the awaited peer waits for: the thread is
 * restricted to its other CPUs, which makes the scheduler move it at once, then given all of
 * them back (it stays where it went until the scheduler balances again). Yielding instead
 * would make the two ranks take turns on one CPU, a context switch per collective, and the
 * scheduler does not part them because neither is always runnable. Only for latency-bound
 * waits (the small path's arrival, where a cache line or two is all there is to exchange: a
 * larger operation would lose its warm caches, and measured slower), while the local ranks
 * have a CPU each, at most once per ENG_MOVE_INTERVAL_NS. Returns whether the thread moved. */
static bool leave_cpu(hal_engine_comm_t *c)
{
    if (!c->cpu_each || !c->latency_bound)
        return false;
    uint64_t now = eng_now_ns();
    if (c->moved_ns && now - c->moved_ns < ENG_MOVE_INTERVAL_NS)
        return false;
    c->moved_ns = now;
    cpu_set_t allowed, others;
    int cpu = sched_getcpu();
    if (cpu < 0 || sched_getaffinity(0, sizeof(allowed), &allowed) != 0 ||
        !CPU_ISSET(cpu, &allowed))
        return false;
    others = allowed;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) == 0 || sched_setaffinity(0, sizeof(others), &others) != 0)
        return false;
    sched_setaffinity(0, sizeof(allowed), &allowed);
    eng_note_cpu(c);
    return true;
}

hal_status_t eng_backoff(hal_engine_comm_t *c, eng_backoff_t *b, int peer, const char *call,
                         const char *what)
{
    if (__atomic_load_n(&c->aborted, __ATOMIC_RELAXED))
        return eng_fail(c, HAL_ERROR_ABORTED, call, "aborted on this rank (while waiting for %s)",
                        what);
    hal_status_t st = eng_check_peer(c, b, peer);
    if (st != HAL_OK)
        return st; /* not latched: the caller looks at its condition once more */
    if (!b->spun && b->spins < ENG_SPIN_BURST) {
        /* Each burst starts by asking whether spinning can help at all. */
        if (b->spins > 0 || !shares_cpu(c, peer) || leave_cpu(c)) {
            b->spins++;
            ENG_PAUSE();
            return HAL_OK;
        }
        b->crowded = true; /* straight to the clock, which yields */
    }
    b->spins = 0;
    uint64_t now = eng_now_ns();
    if (!b->start_ns) {
        b->start_ns = now;
        b->next_check_ns = now + ENG_LIVENESS_NS;
    }
    if (b->spun && now >= b->next_check_ns)
        b->next_check_ns = now + ENG_LIVENESS_NS; /* eng_check_peer just looked */
    uint64_t waited = now - b->start_ns;
    if (waited >= (uint64_t)c->timeout_ms * 1000000u) {
        if (peer >= 0 && !c->tcp)
            return eng_fail(c, HAL_ERROR_TIMEOUT, call,
                            "rank %d (pid %d) stopped answering for %u ms (waiting for %s)", peer,
                            c->peers[peer].pid, c->timeout_ms, what);
        return eng_fail(c, HAL_ERROR_TIMEOUT, call, "no progress for %u ms (waiting for %s)",
                        c->timeout_ms, what);
    }
    if (!b->spun) {
        uint64_t budget = !c->cpu_each       ? ENG_SPIN_SHARED_NS
                          : c->latency_bound ? ENG_SPIN_LATENCY_NS
                                             : ENG_SPIN_BULK_NS;
        if (waited < budget && !b->crowded) {
            ENG_PAUSE();
            return HAL_OK;
        }
        b->spun = true;
    }
    if (waited < ENG_YIELD_NS) {
        sched_yield();
    } else {
        uint64_t ns = (waited - ENG_YIELD_NS) / 8;
        ns = ns < ENG_SLEEP_MIN_NS   ? ENG_SLEEP_MIN_NS
             : ns > ENG_SLEEP_MAX_NS ? ENG_SLEEP_MAX_NS
                                     : ns;
        struct timespec ts = { 0, (long)ns };
        nanosleep(&ts, NULL);
    }
    eng_note_cpu(c); /* it may run elsewhere now */
    return HAL_OK;
}

hal_status_t eng_wait_slow(hal_engine_comm_t *c, const uint64_t *word, uint64_t target, int peer,
                           const char *call, const char *what)
{
    eng_backoff_t b = { 0 };
    for (;;) {
        if (eng_load(word) >= target)
            return HAL_OK;
        hal_status_t st = eng_backoff(c, &b, peer, call, what);
        if (st == ENG_PEER_STOPPED) {
            /* The peer stopped, possibly right after doing what this rank waits for (it
             * publishes progress before its failure word, and a finished peer may exit). */
            if (eng_load(word) >= target)
                return HAL_OK;
            return eng_fail_peer(c, &b, call, what);
        }
        if (st != HAL_OK)
            return st;
    }
}

hal_status_t eng_sync(hal_engine_comm_t *c, bool wait_all, const char *call, const char *what)
{
    uint64_t k = ++c->syncs;
    /* Sequentially consistent: a rank that fails after this point checks for it (drain). */
    __atomic_store_n(&c->me->sync.v, k, __ATOMIC_SEQ_CST);
    if (!wait_all)
        return HAL_OK;
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank)
            continue;
        HAL_CHECK(eng_wait(c, &c->peers[p].ctrl->sync.v, k, p, call, what));
    }
    return HAL_OK;
}
