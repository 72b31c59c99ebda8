// SPDX-License-Identifier: Apache-2.0
// The threads that run the device's kernels: where autograd runs the backward, the intra-op
// threads of the kernels that autograd's device threads run, and what those threads still hold
// when the process ends.
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <c10/core/AutogradState.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/graph_task.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include <dirent.h>
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

// Of the devices this process owns (the others' properties are not its to read).
bool everyDeviceHostAddressable()
{
    bool any = false;
    for (c10::DeviceIndex index = 0; index < deviceCount(); ++index) {
        if (!ownsDevice(index))
            continue;
        if (!hostAddressable(index))
            return false;
        any = true;
    }
    return any;
}

// Autograd runs the backward of every device but the CPU on a worker thread of the device and
// hands each backward() call over to it: two thread wake-ups per call (about 50 us on a VM), and
// the GIL handed over for each Python hook the backward runs (checkpoint's recomputation, DDP's
// and FSDP's hooks): a checkpointed block's backward took twice as long as on the CPU. A
// host-addressable device's kernels are CPU kernels on host memory, whose backward the CPU runs
// on the calling thread. So the first device operator a thread runs turns autograd's
// multithreading off for that thread (its backward then runs on it, as the CPU's does), once:
// torch.autograd.set_multithreading_enabled(True) turns it back on. Returns whether the thread
// is one of autograd's device workers (which keep their multithreading).
bool firstDeviceOperatorOnThread()
{
    static const bool host_addressable = everyDeviceHostAddressable();
    bool worker = onAutogradWorker();
    if (host_addressable && !worker)
        c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
    return worker;
}

// One thread-local for both functions below (every device operator asks).
bool threadIsAutogradWorker()
{
    thread_local const bool worker = firstDeviceOperatorOnThread();
    return worker;
}

// Whether a thread of this process is named `name` (read from /proc/self/task/<id>/comm).
bool threadNamed(const std::string &name)
{
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == nullptr)
        return true; // nothing to look at: do not wait
    bool found = false;
    while (struct dirent *task = readdir(tasks)) {
        if (task->d_name[0] == '.')
            continue;
        std::string path = std::string("/proc/self/task/") + task->d_name + "/comm";
        FILE *comm = std::fopen(path.c_str(), "r");
        if (comm == nullptr)
            continue;
        char line[32] = {};
        bool read = std::fgets(line, sizeof line, comm) != nullptr;
        std::fclose(comm);
        line[std::strcspn(line, "\n")] = '\0';
        if (read && name == line) {
            found = true;
            break;
        }
    }
    closedir(tasks);
    return found;
}

std::atomic<bool> g_autograd_threads_named{ false };

// The autograd engine starts its device threads in the first backward() and does not wait
// for them to name themselves ("pt_autograd_<index>"). When that backward runs on the calling
// thread it can return before they have, and whoever looks for them by name afterwards (tools,
// OpenReg's test_autograd_init) misses some on a loaded machine. So the first device operator
// run inside a backward waits, once per process, until the threads of this backend's devices
// are named: at most 2 s (then it gives up; nothing depends on the names).
void awaitAutogradThreadsNamed()
{
    if (g_autograd_threads_named.load(std::memory_order_relaxed))
        return;
    if (torch::autograd::get_current_graph_task_id() == -1)
        return; // not in a backward: the engine may not have started its threads yet
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (c10::DeviceIndex index = 0; index < deviceCount(); ++index) {
        const std::string name = "pt_autograd_" + std::to_string(index);
        while (!threadNamed(name) && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    g_autograd_threads_named.store(true, std::memory_order_relaxed);
}

// One backward on each initialised device of this process. Runs on a thread of its own, which
// ends after it: grad mode is on and inference mode off there, as on any new thread.
void backwardOnEachDevice()
{
    for (c10::DeviceIndex index = 0; index < deviceCount(); ++index) {
        if (!ownsDevice(index) || !deviceInitialized(index))
            continue;
        at::Tensor leaf = at::zeros({ 1 }, at::TensorOptions().device(kDeviceType, index));
        leaf.set_requires_grad(true);
        at::Tensor root = leaf.sum();
        // On the device's worker thread: the device operators above may have turned this
        // thread's multithreading off (host-addressable devices run their backward on the
        // caller).
        c10::AutogradState::get_tls_state().set_multithreading_enabled(true);
        torch::autograd::backward({ root });
    }
}

} // namespace

void releaseFinishedBackwards()
{
    if (!threadNamed("pt_autograd_0"))
        return; // autograd starts its device threads in a process's first backward()
    // A thread of its own: this one's thread-local state (what a backward's task copies) may
    // hold Python objects; a new thread's holds none.
    std::exception_ptr error;
    std::thread worker([&error] {
        try {
            backwardOnEachDevice();
        } catch (...) {
            error = std::current_exception();
        }
    });
    worker.join();
    if (error)
        std::rethrow_exception(error);
}

void backwardOnCallingThread()
{
    threadIsAutogradWorker();
    awaitAutogradThreadsNamed();
}

void matchCallerThreads()
{
    awaitAutogradThreadsNamed();
    if (!threadIsAutogradWorker()) {
        g_caller_threads.store(at::get_num_threads(), std::memory_order_relaxed);
        return;
    }
    int caller = g_caller_threads.load(std::memory_order_relaxed);
    if (caller > 0 && at::get_num_threads() != caller)
        at::set_num_threads(caller);
}

} // namespace torch_hal
