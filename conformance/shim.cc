// SPDX-License-Identifier: Apache-2.0
// Conformance suite harness: registers every C test body (conformance/cts_tests.inc) as a
// value-parameterized GoogleTest over (backend, device), runs each test against a freshly opened
// backend, guards every test with a timeout, and prints a per-area Markdown summary that ends
// with the line "N passed, N failed, N skipped". By default each area runs in a child process of
// its own (areas.h), so that a crash or hang fails that area's test and the rest still runs;
// --in-process runs everything in this process.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "conformance/areas.h"
#include "conformance/summary.h"
#include "cts.h"

// Huge allocations are part of the out-of-memory tests: let the sanitizers' allocators return
// NULL as the system allocator would, instead of aborting.
extern "C" const char *__asan_default_options()
{
    return "allocator_may_return_null=1";
}
extern "C" const char *__tsan_default_options()
{
    return "allocator_may_return_null=1";
}

namespace
{

struct Options {
    std::vector<std::string> backends;
    std::string backends_arg; // as given, for the areas' child processes
    long device = -1;
    unsigned timeout_s = 60;
    unsigned area_timeout_s = 1800;
    bool run_known_failures = false;
    bool validation = false;
    bool in_process = false;   // run the bodies in this process (no child per area)
    int child_records_fd = -1; // >= 0: this is an area's child process, reporting to this fd
    std::string self_exe;
    std::string fixture_dir;
};

Options g_options;

// How this process takes part: it runs the bodies itself (in-process, or as an area's child),
// or it is the parent that runs each area in a child and reports what the children said.
bool IsParent()
{
    return !g_options.in_process && g_options.child_records_fd < 0;
}

cts::RecordWriter *g_records = nullptr;   // in an area's child process
cts::AreaRunner *g_area_runner = nullptr; // in the parent

} // namespace

namespace cts
{

// One (backend, device) pair under test.
struct Param {
    std::string backend; // as given to hal_backend_open
    uint32_t device = 0;
    uint32_t device_count = 0;
    std::string lib_path; // the backend's library file, empty if unknown
    std::string label;    // test-name suffix, e.g. "cpu_0"
};

void PrintTo(const Param &p, std::ostream *os)
{
    *os << p.label;
}

std::vector<Param> g_params;

} // namespace cts

namespace
{

// ---- Per-test watchdog ------------------------------------------------------------------------

class Watchdog
{
  public:
    void Start()
    {
        thread_ = std::thread([this] { Loop(); });
        thread_.detach();
    }
    void Arm(const std::string &name, unsigned seconds)
    {
        std::lock_guard<std::mutex> lock(mu_);
        name_ = name;
        armed_ = true;
        deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        seconds_ = seconds;
        cv_.notify_all();
    }
    void Disarm()
    {
        std::lock_guard<std::mutex> lock(mu_);
        armed_ = false;
        cv_.notify_all();
    }

  private:
    void Loop()
    {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            if (!armed_) {
                cv_.wait(lock);
                continue;
            }
            if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
                std::chrono::steady_clock::now() >= deadline_) {
                std::string name = name_;
                lock.unlock();
                Fire(name);
            }
        }
    }
    void Fire(const std::string &name)
    {
        std::fprintf(stdout,
                     "[  TIMEOUT ] %s did not finish within %u s (HAL_CTS_TIMEOUT); "
                     "counted as failed, exiting\n",
                     name.c_str(), seconds_);
        if (g_records != nullptr) {
            // An area's child: the parent reports the test and runs the rest of the area.
            g_records->TimedOut(name, seconds_);
            std::fflush(stdout);
            std::fflush(stderr);
            _exit(1);
        }
        cts::CountTimedOut(name);
        cts::PrintSummary(stdout);
        std::fflush(stderr);
        _exit(1);
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
    bool armed_ = false;
    std::string name_;
    unsigned seconds_ = 0;
    std::chrono::steady_clock::time_point deadline_;
};

// Never destroyed: its thread may still wait on the condition variable when the process exits.
Watchdog &g_watchdog = *new Watchdog;

} // namespace

// ---- Failure reports from C bodies -------------------------------------------------------------

extern "C" void cts_harness_report(const char *file, int line, const char *message)
{
    ADD_FAILURE_AT(file, line) << message;
}

namespace cts
{

// ---- The fixture shared by all areas ----------------------------------------------------------

class Test : public testing::TestWithParam<Param>
{
  protected:
    void SetUp() override
    {
        const testing::TestInfo *info = testing::UnitTest::GetInstance()->current_test_info();
        name_ = cts::FullName(*info);
        const Param &p = GetParam();
        cts::NoteTest(name_, p.backend, info->test_suite_name());
        if (IsParent())
            return; // the area's child process ran this test; Run() reports what it said
        g_watchdog.Arm(name_, g_options.timeout_s);

        std::memset(&ctx_, 0, sizeof(ctx_));
        ctx_.backend_name = p.backend.c_str();
        ctx_.device_index = p.device;
        ctx_.backend_lib_path = p.lib_path.empty() ? nullptr : p.lib_path.c_str();
        ctx_.fixture_dir = g_options.fixture_dir.empty() ? nullptr : g_options.fixture_dir.c_str();
        ctx_.self_exe = g_options.self_exe.empty() ? nullptr : g_options.self_exe.c_str();
        ctx_.validation = g_options.validation;
        ctx_.run_known_failures = g_options.run_known_failures;
        ctx_.props.struct_size = sizeof(ctx_.props);

        hal_set_current_device(nullptr);
        leaks_before_ = cts_leak_count();
        hal_status_t st = hal_backend_open(ctx_.backend_name, &ctx_.backend);
        ASSERT_EQ(st, HAL_OK) << "hal_backend_open(\"" << p.backend
                              << "\"): " << hal_status_string(st) << ": "
                              << hal_last_error_message();
        st = hal_device_count(ctx_.backend, &ctx_.device_count);
        ASSERT_EQ(st, HAL_OK) << "hal_device_count: " << hal_last_error_message();
        st = hal_device_get(ctx_.backend, p.device, &ctx_.device);
        ASSERT_EQ(st, HAL_OK) << "hal_device_get(" << p.device << "): " << hal_last_error_message();
        st = hal_device_get_properties(ctx_.device, &ctx_.props);
        ASSERT_EQ(st, HAL_OK) << "hal_device_get_properties: " << hal_last_error_message();
        ready_ = true;
    }

    void TearDown() override
    {
        if (IsParent())
            return;
        cts_ctx_open_gates(&ctx_);
        if (ctx_.backend != nullptr) {
            hal_status_t st = hal_backend_close(ctx_.backend);
            EXPECT_EQ(st, HAL_OK) << "closing the test's backend: " << hal_status_string(st) << ": "
                                  << hal_last_error_message();
        }
        hal_set_current_device(nullptr);
        if (ctx_.validation && ready_ && !HasFailure()) {
            uint64_t leaks = cts_leak_count() - leaks_before_;
            EXPECT_EQ(leaks, ctx_.expected_leaks)
                << "the validation layer counted leaked objects (the test did not clean up, or "
                   "the layer miscounts)";
        }
        cts_ctx_release(&ctx_);
        g_watchdog.Disarm();
    }

    void Run(int (*body)(cts_ctx_t *))
    {
        if (IsParent()) {
            Report(g_area_runner->Find(name_));
            return;
        }
        if (!ready_)
            return;
        int rc = SelfTestFault(name_);
        if (rc < 0)
            rc = body(&ctx_);
        if (ctx_.known_failure)
            cts::NoteOutcome(name_, true, nullptr);
        if (rc == CTS_SKIP) {
            cts::NoteOutcome(name_, ctx_.known_failure, ctx_.skip_reason);
            GTEST_SKIP() << ctx_.skip_reason;
        } else if (rc != CTS_PASS && !HasFailure()) {
            ADD_FAILURE() << "the body returned " << rc << " without reporting a failure";
        } else if (rc == CTS_PASS && ctx_.known_failure && !HasFailure()) {
            std::printf("[ UNEXPECTED PASS ] %s: %s\n", name_.c_str(), ctx_.skip_reason);
        }
    }

    cts_ctx_t ctx_;

  private:
    // In the parent: the test's result as its area's child process reported it, with what the
    // harness adds (a crash, a timeout, not run).
    void Report(const Outcome &o)
    {
        cts::NoteOutcome(name_, o.known_failure, o.skip_reason.c_str());
        for (const auto &f : o.failures)
            ADD_FAILURE_AT(f.file.c_str(), f.line) << f.message;
        for (const auto &p : o.problems)
            ADD_FAILURE() << p;
        if (o.state != Outcome::State::kEnded || !o.problems.empty())
            return;
        if (o.result == 'S')
            GTEST_SKIP() << o.skip_reason;
        if (o.result == 'F' && o.failures.empty())
            ADD_FAILURE() << "the area's process reported a failure without a message";
    }

    // Test-only hooks for the harness's own test (harness_test.py): HAL_CTS_SELFTEST_CRASH,
    // _HANG, _FAIL and _SKIP name tests (':'-separated full names such as "stream.fifo/cpu_0")
    // that crash with SIGSEGV, hang, fail or skip instead of running their body. Returns the
    // body's result to report, or -1 to run the body.
    int SelfTestFault(const std::string &name)
    {
        if (NamedIn("HAL_CTS_SELFTEST_FAIL", name)) {
            cts_failf(__FILE__, __LINE__, "HAL_CTS_SELFTEST_FAIL: failing %s", name.c_str());
            return CTS_FAIL;
        }
        if (NamedIn("HAL_CTS_SELFTEST_SKIP", name))
            return cts_skip(&ctx_, "HAL_CTS_SELFTEST_SKIP: skipping %s", name.c_str());
        if (NamedIn("HAL_CTS_SELFTEST_CRASH", name)) {
            std::fprintf(stderr, "hal_conformance: HAL_CTS_SELFTEST_CRASH: crashing in %s\n",
                         name.c_str());
            std::fflush(stderr);
            signal(SIGSEGV, SIG_DFL);
            raise(SIGSEGV);
        }
        if (NamedIn("HAL_CTS_SELFTEST_HANG", name)) {
            std::fprintf(stderr, "hal_conformance: HAL_CTS_SELFTEST_HANG: hanging in %s\n",
                         name.c_str());
            std::fflush(stderr);
            for (;;)
                pause();
        }
        return -1;
    }
    static bool NamedIn(const char *var, const std::string &name)
    {
        const char *list = std::getenv(var);
        if (list == nullptr)
            return false;
        std::string all = std::string(":") + list + ":";
        return all.find(":" + name + ":") != std::string::npos;
    }

    std::string name_;
    uint64_t leaks_before_ = 0;
    bool ready_ = false;
};

// One fixture per API area, so that test names read "<area>.<name>/<backend>_<device>".
#define CTS_AREA(area)       \
    class area : public Test \
    {                        \
    };                       \
    GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(area);
CTS_AREA(backend)
CTS_AREA(device)
CTS_AREA(memory)
CTS_AREA(stream)
CTS_AREA(event)
CTS_AREA(status)
CTS_AREA(handles)
CTS_AREA(threads)
CTS_AREA(allocator)
CTS_AREA(comm)
CTS_AREA(program)
#undef CTS_AREA

#define CTS_TEST(area, name)      \
    TEST_P(area, name)            \
    {                             \
        Run(cts_##area##_##name); \
    }
#include "conformance/cts_tests.inc"
#undef CTS_TEST

std::string ParamName(const testing::TestParamInfo<Param> &info)
{
    return info.param.label;
}

// The parameter list is evaluated lazily, after main() has filled g_params.
#define CTS_INSTANTIATE(area) \
    INSTANTIATE_TEST_SUITE_P(, area, testing::ValuesIn(g_params), ParamName)
CTS_INSTANTIATE(backend);
CTS_INSTANTIATE(device);
CTS_INSTANTIATE(memory);
CTS_INSTANTIATE(stream);
CTS_INSTANTIATE(event);
CTS_INSTANTIATE(status);
CTS_INSTANTIATE(handles);
CTS_INSTANTIATE(threads);
CTS_INSTANTIATE(allocator);
CTS_INSTANTIATE(comm);
CTS_INSTANTIATE(program);
#undef CTS_INSTANTIATE

} // namespace cts

// ---- Set-up -----------------------------------------------------------------------------------

namespace
{

std::vector<std::string> Split(const std::string &s, char sep)
{
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep))
        if (!item.empty())
            out.push_back(item);
    return out;
}

bool FileExists(const std::string &path)
{
    return access(path.c_str(), F_OK) == 0;
}

std::string Dirname(const std::string &path)
{
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string SelfExe()
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return "";
    buf[n] = '\0';
    return buf;
}

// Runfiles roots of this binary: under `bazel test` (TEST_SRCDIR) or `bazel run` (RUNFILES_DIR,
// or <argv0>.runfiles).
std::vector<std::string> RunfilesRoots(const char *argv0)
{
    std::vector<std::string> roots;
    const char *ws = std::getenv("TEST_WORKSPACE");
    std::string workspace = ws != nullptr && ws[0] != '\0' ? ws : "torch_hal";
    for (const char *var : { "TEST_SRCDIR", "RUNFILES_DIR" }) {
        const char *dir = std::getenv(var);
        if (dir != nullptr && dir[0] != '\0')
            roots.push_back(std::string(dir) + "/" + workspace);
    }
    if (argv0 != nullptr)
        roots.push_back(std::string(argv0) + ".runfiles/" + workspace);
    return roots;
}

// Without HAL_BACKEND_PATH, look for the backends where Bazel puts them: in the runfiles, or in
// bazel-bin next to this binary's package.
void DeriveBackendPath(const std::vector<std::string> &backends, const char *argv0)
{
    const char *set = std::getenv("HAL_BACKEND_PATH");
    if (set != nullptr && set[0] != '\0')
        return;
    std::vector<std::string> dirs;
    for (const auto &b : backends) {
        if (b.find('/') != std::string::npos)
            continue;
        std::vector<std::string> candidates;
        for (const auto &root : RunfilesRoots(argv0))
            candidates.push_back(root + "/hal_backends/" + b);
        if (!g_options.self_exe.empty())
            candidates.push_back(Dirname(Dirname(g_options.self_exe)) + "/hal_backends/" + b);
        for (const auto &dir : candidates) {
            if (FileExists(dir + "/libhal_backend_" + b + ".so")) {
                char real[4096];
                dirs.push_back(realpath(dir.c_str(), real) != nullptr ? real : dir);
                break;
            }
        }
    }
    std::string path;
    for (const auto &d : dirs)
        path += (path.empty() ? "" : ":") + d;
    if (!path.empty())
        setenv("HAL_BACKEND_PATH", path.c_str(), 1);
}

std::string FindFixtureDir(const char *argv0)
{
    const char *env = std::getenv("HAL_CTS_FIXTURE_DIR");
    if (env != nullptr && env[0] != '\0')
        return env;
    std::vector<std::string> candidates;
    for (const auto &root : RunfilesRoots(argv0))
        candidates.push_back(root + "/conformance");
    if (!g_options.self_exe.empty())
        candidates.push_back(Dirname(g_options.self_exe));
    for (const auto &dir : candidates)
        if (FileExists(dir + "/libcts_noentry.so"))
            return dir;
    return "";
}

// The file the dynamic loader mapped for an open backend.
std::string FindLibraryPath(const std::string &backend)
{
    if (backend.find('/') != std::string::npos) {
        char real[4096];
        return realpath(backend.c_str(), real) != nullptr ? real : backend;
    }
    std::ifstream maps("/proc/self/maps");
    std::string line, suffix = "/libhal_backend_" + backend + ".so";
    while (std::getline(maps, line)) {
        size_t slash = line.find('/');
        if (slash == std::string::npos)
            continue;
        std::string path = line.substr(slash);
        if (path.size() >= suffix.size() &&
            path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
            return path;
    }
    return "";
}

std::string Label(const std::string &backend, uint32_t device)
{
    std::string base = backend;
    size_t slash = base.rfind('/');
    if (slash != std::string::npos)
        base = base.substr(slash + 1);
    std::string label;
    for (char c : base)
        label += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return label + "_" + std::to_string(device);
}

bool Enumerate()
{
    for (const auto &b : g_options.backends) {
        hal_backend_t backend = nullptr;
        hal_status_t st = hal_backend_open(b.c_str(), &backend);
        if (st != HAL_OK) {
            std::fprintf(stderr, "hal_conformance: cannot open backend \"%s\": %s: %s\n", b.c_str(),
                         hal_status_string(st), hal_last_error_message());
            return false;
        }
        uint32_t count = 0;
        st = hal_device_count(backend, &count);
        std::string lib = FindLibraryPath(b);
        hal_backend_close(backend);
        if (st != HAL_OK) {
            std::fprintf(stderr, "hal_conformance: hal_device_count(\"%s\"): %s\n", b.c_str(),
                         hal_status_string(st));
            return false;
        }
        if (count == 0)
            std::fprintf(stderr, "hal_conformance: backend \"%s\" has no devices\n", b.c_str());
        if (g_options.device >= 0 && static_cast<uint32_t>(g_options.device) >= count) {
            std::fprintf(stderr, "hal_conformance: --device=%ld, but \"%s\" has %u devices\n",
                         g_options.device, b.c_str(), count);
            return false;
        }
        for (uint32_t d = 0; d < count; d++) {
            if (g_options.device >= 0 && d != static_cast<uint32_t>(g_options.device))
                continue;
            cts::Param p;
            p.backend = b;
            p.device = d;
            p.device_count = count;
            p.lib_path = lib;
            p.label = Label(b, d);
            cts::g_params.push_back(p);
        }
    }
    return !cts::g_params.empty();
}

// Child mode used by cts_probe_open: open one backend under the inherited environment and exit
// with the status. _exit skips the leak checker, which is not what the probe is about.
int Probe(const char *name)
{
    hal_backend_t backend = nullptr;
    hal_status_t st = hal_backend_open(name, &backend);
    if (st == HAL_OK)
        hal_backend_close(backend);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(static_cast<int>(st));
}

void Usage()
{
    std::printf(
        "hal_conformance: the torch-hal conformance suite (GoogleTest flags also apply)\n"
        "  --backend=a,b       backends to test, names or library paths (env HAL_BACKENDS;\n"
        "                      default cpu)\n"
        "  --device=N          only device N of each backend (env HAL_CTS_DEVICE; default: all\n"
        "                      devices)\n"
        "  --layers=LIST       sets HAL_LAYERS, e.g. validation\n"
        "  --timeout=S         per-test timeout in seconds (env HAL_CTS_TIMEOUT; default 60)\n"
        "  --area-timeout=S    timeout of each area's child process, in seconds (env\n"
        "                      HAL_CTS_AREA_TIMEOUT; default 1800)\n"
        "  --in-process        run every area in this process, e.g. under a debugger (env\n"
        "                      HAL_CTS_IN_PROCESS=1); by default each area runs in a child\n"
        "                      process, so a crash or hang fails only that area's test\n"
        "  --run-known-failures  run tests marked CTS_KNOWN_FAILURE_ON (env\n"
        "                      HAL_CTS_RUN_KNOWN_FAILURES=1) and list those that pass\n"
        "Environment: HAL_BACKEND_PATH (where backends are found), HAL_CTS_FIXTURE_DIR (the\n"
        "fixture libraries libcts_*.so), HAL_CTS_NEFF_DIR (compiled add.neff and fail.neff for\n"
        "the program.neff_* tests; default: the libnrt emulator's test container).\n");
}

bool ParseUnsigned(const char *s, long *out)
{
    char *end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 0)
        return false;
    *out = v;
    return true;
}

} // namespace

// What every area's child process is given: this run's options, and GoogleTest's flags that
// still matter in a child (the filter is the child's own; sharding, repeats and output files
// stay with the parent).
cts::AreaConfig ChildConfig()
{
    cts::AreaConfig c;
    c.self_exe = g_options.self_exe;
    c.area_timeout_s = g_options.area_timeout_s;
    c.args.push_back("--backend=" + g_options.backends_arg);
    if (g_options.device >= 0)
        c.args.push_back("--device=" + std::to_string(g_options.device));
    c.args.push_back("--timeout=" + std::to_string(g_options.timeout_s));
    if (g_options.run_known_failures)
        c.args.push_back("--run-known-failures");
    c.args.push_back("--gtest_color=" + GTEST_FLAG_GET(color));
    if (GTEST_FLAG_GET(also_run_disabled_tests))
        c.args.push_back("--gtest_also_run_disabled_tests");
    return c;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (std::strncmp(argv[i], "--cts-probe-open=", 17) == 0)
            return Probe(argv[i] + 17);
    // Child mode of the collectives tests: one rank of a job (conformance/src/comm_rank.c).
    if (argc > 1 && std::strncmp(argv[1], "--cts-comm-rank=", 16) == 0)
        return cts_comm_rank_main(argc, argv);
    // Child mode of the areas: run the selected tests here, report to the parent (areas.h).
    if (argc > 1 && std::strncmp(argv[1], "--cts-area-child=", 17) == 0) {
        long fd = -1;
        if (!ParseUnsigned(argv[1] + 17, &fd) || fd > 1000000) {
            std::fprintf(stderr, "hal_conformance: bad %s\n", argv[1]);
            return 2;
        }
        g_options.child_records_fd = static_cast<int>(fd);
        cts::DieWithParent();
        argv[1] = argv[0];
        argv++;
        argc--;
    }

    const char *env_backends = std::getenv("HAL_BACKENDS");
    std::string backends =
        env_backends != nullptr && env_backends[0] != '\0' ? env_backends : "cpu";
    const char *env_timeout = std::getenv("HAL_CTS_TIMEOUT");
    long timeout = 60;
    if (env_timeout != nullptr && env_timeout[0] != '\0' &&
        (!ParseUnsigned(env_timeout, &timeout) || timeout == 0)) {
        std::fprintf(stderr, "hal_conformance: bad HAL_CTS_TIMEOUT=%s\n", env_timeout);
        return 2;
    }
    const char *env_known = std::getenv("HAL_CTS_RUN_KNOWN_FAILURES");
    g_options.run_known_failures = env_known != nullptr && std::strcmp(env_known, "1") == 0;
    const char *env_area_timeout = std::getenv("HAL_CTS_AREA_TIMEOUT");
    long area_timeout = 1800;
    if (env_area_timeout != nullptr && env_area_timeout[0] != '\0' &&
        (!ParseUnsigned(env_area_timeout, &area_timeout) || area_timeout == 0)) {
        std::fprintf(stderr, "hal_conformance: bad HAL_CTS_AREA_TIMEOUT=%s\n", env_area_timeout);
        return 2;
    }
    const char *env_device = std::getenv("HAL_CTS_DEVICE");
    if (env_device != nullptr && env_device[0] != '\0' &&
        !ParseUnsigned(env_device, &g_options.device)) {
        std::fprintf(stderr, "hal_conformance: bad HAL_CTS_DEVICE=%s\n", env_device);
        return 2;
    }
    const char *env_in_process = std::getenv("HAL_CTS_IN_PROCESS");
    g_options.in_process = env_in_process != nullptr && std::strcmp(env_in_process, "1") == 0;

    // Take our flags out of argv before GoogleTest sees it.
    bool help = false;
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (std::strncmp(a, "--backend=", 10) == 0) {
            backends = a + 10;
        } else if (std::strncmp(a, "--device=", 9) == 0) {
            if (!ParseUnsigned(a + 9, &g_options.device)) {
                std::fprintf(stderr, "hal_conformance: bad %s\n", a);
                return 2;
            }
        } else if (std::strncmp(a, "--layers=", 9) == 0) {
            setenv("HAL_LAYERS", a + 9, 1);
        } else if (std::strncmp(a, "--timeout=", 10) == 0) {
            if (!ParseUnsigned(a + 10, &timeout) || timeout == 0) {
                std::fprintf(stderr, "hal_conformance: bad %s\n", a);
                return 2;
            }
        } else if (std::strncmp(a, "--area-timeout=", 15) == 0) {
            if (!ParseUnsigned(a + 15, &area_timeout) || area_timeout == 0) {
                std::fprintf(stderr, "hal_conformance: bad %s\n", a);
                return 2;
            }
        } else if (std::strcmp(a, "--in-process") == 0) {
            g_options.in_process = true;
        } else if (std::strcmp(a, "--run-known-failures") == 0) {
            g_options.run_known_failures = true;
        } else {
            if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0) {
                Usage();
                help = true;
            }
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    argv[argc] = nullptr;
    g_options.timeout_s = static_cast<unsigned>(timeout);
    g_options.area_timeout_s = static_cast<unsigned>(area_timeout);
    g_options.backends_arg = backends;
    g_options.backends = Split(backends, ',');
    const char *layers = std::getenv("HAL_LAYERS");
    for (const auto &l : Split(layers != nullptr ? layers : "", ','))
        if (l == "validation")
            g_options.validation = true;
    g_options.self_exe = SelfExe();
    DeriveBackendPath(g_options.backends, argv[0]);
    g_options.fixture_dir = FindFixtureDir(argv[0]);

    // GoogleTest expands the parameter lists inside InitGoogleTest: enumerate devices first.
    bool enumerated = Enumerate();
    testing::InitGoogleTest(&argc, argv);
    if (GTEST_FLAG_GET(list_tests) || help)
        return RUN_ALL_TESTS();
    if (!enumerated) {
        std::fprintf(stdout, "\n0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    testing::TestEventListeners &listeners = testing::UnitTest::GetInstance()->listeners();
    if (g_options.child_records_fd >= 0) {
        // An area's child: the parent counts, summarizes and writes the output files.
        g_records = new cts::RecordWriter(g_options.child_records_fd);
        // The parent prints every test's result; the child adds only what bodies print.
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(cts::NewRecordListener(g_records));
        g_watchdog.Start();
        return RUN_ALL_TESTS();
    }
    if (IsParent()) {
        if (g_options.self_exe.empty()) {
            std::fprintf(stderr, "hal_conformance: cannot find this executable to run the "
                                 "areas in child processes; use --in-process\n");
            std::fprintf(stdout, "\n0 passed, 1 failed, 0 skipped\n");
            return 1;
        }
        // The children find what this process found.
        if (!g_options.fixture_dir.empty())
            setenv("HAL_CTS_FIXTURE_DIR", g_options.fixture_dir.c_str(), 1);
        g_area_runner = new cts::AreaRunner(ChildConfig());
        listeners.Append(g_area_runner);
    }
    listeners.Append(cts::NewSummaryListener());
    if (!IsParent())
        g_watchdog.Start();
    int rc = RUN_ALL_TESTS();
    cts::PrintSummary(stdout);
    return rc;
}
