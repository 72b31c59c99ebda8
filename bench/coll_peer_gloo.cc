// SPDX-License-Identifier: Apache-2.0
// hal-bench part "coll": the Gloo peer (C++, because Gloo is a C++ library). One process per
// rank, started by the driver (bench_coll_peers.c); ranks meet through a
// gloo::rendezvous::FileStore in a directory the driver creates and connect over Gloo's TCP
// transport on 127.0.0.1.
//
//   coll_peer_gloo --rank=R --size=N --store=DIR --plan=... --colls=...
//
// allreduce runs gloo::AllreduceRing, gloo::AllreduceRingChunked and
// gloo::AllreduceHalvingDoubling, allgather gloo::AllgatherRing, broadcast
// gloo::BroadcastOneToAll (root 0); the other collectives are not measured. Each algorithm
// object is built once per size and run() back to back, as Gloo intends. Gloo's allreduce works
// in place, so its timed runs reduce zeros (the values would grow without bound otherwise) and
// the check refills the inputs and runs once more; allgather and broadcast are checked after
// the timed loop directly. Every rank prints its own result lines (coll_common.h).
//
// Built outside the HAL (see bench/BUILD and README.md):
//   g++ -std=c++17 -O2 -Wall -Wextra -Werror -I. -o coll_peer_gloo bench/coll_peer_gloo.cc
//       -lgloo -pthread
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench/coll_common.h"

namespace
{

double now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct Job {
    std::shared_ptr<gloo::rendezvous::Context> context;
    int rank = 0, size = 1;
    std::vector<float> send, recv;
};

void barrier(Job &job)
{
    gloo::BarrierAllToAll(job.context).run();
}

// Times step->reps loops of step->iters runs of `algo` after step->warmup runs; ns[r] per op.
void time_runs(Job &job, gloo::Algorithm &algo, const coll_step_t *step, double *ns)
{
    barrier(job);
    for (uint32_t w = 0; w < step->warmup; w++)
        algo.run();
    for (uint32_t r = 0; r < step->reps; r++) {
        barrier(job);
        double t0 = now_ns();
        for (uint32_t it = 0; it < step->iters; it++)
            algo.run();
        ns[r] = (now_ns() - t0) / (double)step->iters;
    }
}

template <typename Algo> void bench_allreduce(Job &job, const char *name, const coll_step_t *step)
{
    coll_shape_t sh = coll_shape_of(COLL_ALLREDUCE, step->bytes, job.size);
    float *buf = job.recv.data();
    std::memset(buf, 0, sh.recv_elems * sizeof(float));
    Algo algo(job.context, std::vector<float *>{ buf }, (int)sh.count);
    double ns[COLL_MAX_REPS];
    time_runs(job, algo, step, ns);
    coll_fill_send(job.rank, buf, sh.recv_elems);
    barrier(job);
    algo.run();
    uint64_t wrong = coll_count_wrong(COLL_ALLREDUCE, job.rank, job.size, &sh, buf);
    coll_print_result("gloo", COLL_ALLREDUCE, name, &sh, step->iters, wrong, ns, step->reps);
}

void bench_allgather(Job &job, const coll_step_t *step)
{
    coll_shape_t sh = coll_shape_of(COLL_ALLGATHER, step->bytes, job.size);
    coll_fill_send(job.rank, job.send.data(), sh.send_elems);
    std::memset(job.recv.data(), 0xff, sh.recv_elems * sizeof(float));
    gloo::AllgatherRing<float> algo(job.context, std::vector<const float *>{ job.send.data() },
                                    job.recv.data(), (int)sh.count);
    double ns[COLL_MAX_REPS];
    time_runs(job, algo, step, ns);
    uint64_t wrong = coll_count_wrong(COLL_ALLGATHER, job.rank, job.size, &sh, job.recv.data());
    coll_print_result("gloo", COLL_ALLGATHER, "ring", &sh, step->iters, wrong, ns, step->reps);
}

void bench_broadcast(Job &job, const coll_step_t *step)
{
    coll_shape_t sh = coll_shape_of(COLL_BROADCAST, step->bytes, job.size);
    float *buf = job.recv.data();
    std::memset(buf, 0xff, sh.recv_elems * sizeof(float));
    if (job.rank == 0)
        coll_fill_send(0, buf, sh.recv_elems);
    gloo::BroadcastOneToAll<float> algo(job.context, std::vector<float *>{ buf }, sh.count, 0, 0);
    double ns[COLL_MAX_REPS];
    time_runs(job, algo, step, ns);
    uint64_t wrong = coll_count_wrong(COLL_BROADCAST, job.rank, job.size, &sh, buf);
    coll_print_result("gloo", COLL_BROADCAST, "one_to_all", &sh, step->iters, wrong, ns,
                      step->reps);
}

int run(int argc, char **argv)
{
    coll_plan_t plan;
    std::memset(&plan, 0, sizeof(plan));
    int rank = -1, size = 0;
    std::string store_dir;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = coll_plan_arg(&plan, a);
        if (r == 1)
            continue;
        if (r == 0 && std::strncmp(a, "--rank=", 7) == 0)
            rank = std::atoi(a + 7);
        else if (r == 0 && std::strncmp(a, "--size=", 7) == 0)
            size = std::atoi(a + 7);
        else if (r == 0 && std::strncmp(a, "--store=", 8) == 0)
            store_dir = a + 8;
        else {
            std::fprintf(stderr, "coll_peer_gloo: bad argument '%s'\n", a);
            return 2;
        }
    }
    if (size < 1 || rank < 0 || rank >= size || store_dir.empty() || plan.nsteps == 0 ||
        plan.ncolls == 0) {
        std::fprintf(stderr, "usage: coll_peer_gloo --rank=R --size=N --store=DIR "
                             "--plan=B:I:W:R[,...] --colls=NAME[,...]\n");
        return 2;
    }

    Job job;
    job.rank = rank;
    job.size = size;
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    job.context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    job.context->connectFullMesh(store, device);
    if (rank == 0) {
        std::printf("info Gloo (TCP transport on 127.0.0.1, FileStore rendezvous)\n");
        std::fflush(stdout);
    }

    size_t max_send, max_recv;
    coll_plan_max_elems(&plan, size, &max_send, &max_recv);
    job.send.assign(max_send, 0.0f); // faults every page in before any timing
    job.recv.assign(max_recv, 0.0f);

    for (int c = 0; c < plan.ncolls; c++) {
        for (int s = 0; s < plan.nsteps; s++) {
            const coll_step_t *step = &plan.step[s];
            switch (plan.coll[c]) {
            case COLL_ALLREDUCE:
                bench_allreduce<gloo::AllreduceRing<float>>(job, "ring", step);
                bench_allreduce<gloo::AllreduceRingChunked<float>>(job, "ring_chunked", step);
                bench_allreduce<gloo::AllreduceHalvingDoubling<float>>(job, "halving_doubling",
                                                                       step);
                break;
            case COLL_ALLGATHER:
                bench_allgather(job, step);
                break;
            case COLL_BROADCAST:
                bench_broadcast(job, step);
                break;
            default:
                break; // not measured with Gloo
            }
        }
    }
    barrier(job);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    try {
        return run(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "coll_peer_gloo: %s\n", e.what());
        return 1;
    }
}
