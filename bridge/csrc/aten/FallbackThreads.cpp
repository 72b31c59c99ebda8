// SPDX-License-Identifier: Apache-2.0
// The fallback's kernels on the autograd engine's device threads: the intra-op threads of the
// thread that ran the forward.
#include <ATen/Parallel.h>

#include <atomic>
#include <cstring>

#include <pthread.h>

#include "aten/Common.h"

namespace torch_hal
{

// The autograd engine runs the backward of device tensors on a worker thread per device
// ("pt_autograd_<index>"), and that of CPU tensors on the thread that called backward(). A
// thread's number of intra-op (OpenMP) threads is its own: a thread takes the value of the
// last torch.set_num_threads() of any thread when it first runs a parallel kernel. The
// pin-memory thread of DataLoader(pin_memory=True) calls torch.set_num_threads(1), so a worker
// started after one ran every kernel on one thread while the caller kept all of them:
// reductions split differently, the device's gradients differed from the CPU's in the last
// bits, and the backward used one core. On the workers, kernels run with the intra-op threads
// of the last other thread that ran a kernel on the device (the one that ran the forward).
namespace
{

std::atomic<int> g_caller_threads{ 0 };

bool onAutogradWorker()
{
    char name[16] = {};
    return pthread_getname_np(pthread_self(), name, sizeof name) == 0 &&
           std::strncmp(name, "pt_autograd_", 12) == 0;
}

} // namespace

void matchCallerThreads()
{
    thread_local const bool worker = onAutogradWorker();
    if (!worker) {
        g_caller_threads.store(at::get_num_threads(), std::memory_order_relaxed);
        return;
    }
    int caller = g_caller_threads.load(std::memory_order_relaxed);
    if (caller > 0 && at::get_num_threads() != caller)
        at::set_num_threads(caller);
}

} // namespace torch_hal
