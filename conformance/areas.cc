// SPDX-License-Identifier: Apache-2.0
// Conformance harness: each area in a child process of its own (see areas.h).
#include "conformance/areas.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

extern char **environ;

namespace cts
{

namespace
{

// ---- The record format: one line per record, fields separated by tabs ------------------------
//   S <test>                          the test started
//   F <test> <file> <line> <message>  the test reported a failure
//   E <test> <P|F|S> <0|1> <reason>   the test ended: result, known failure, skip reason
//   T <test> <seconds>                the per-test watchdog fired
// Backslash, tab and newline inside a field are written as \\, \t and \n.

std::string Escape(const std::string &s)
{
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\t')
            out += "\\t";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string Unescape(const std::string &s)
{
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        char c = s[++i];
        out += c == 't' ? '\t' : c == 'n' ? '\n' : c;
    }
    return out;
}

std::vector<std::string> Fields(const std::string &line)
{
    std::vector<std::string> fields;
    size_t start = 0;
    for (;;) {
        size_t tab = line.find('\t', start);
        fields.push_back(Unescape(line.substr(start, tab - start)));
        if (tab == std::string::npos)
            return fields;
        start = tab + 1;
    }
}

// The process group of the area's child while it runs (0: none), for the signal handler.
volatile sig_atomic_t g_running_group = 0;

void EndRunningAreaAndDie(int sig)
{
    pid_t group = g_running_group;
    if (group > 0)
        kill(-group, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

double NowSeconds()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The parent's environment, less what would make a child shard again, repeat, or write the
// parent's output files: the parent's GoogleTest already applied those.
std::vector<std::string> ChildEnvironment()
{
    static const char *const kDropped[] = { "XML_OUTPUT_FILE=",        "TEST_PREMATURE_EXIT_FILE=",
                                            "TEST_SHARD_STATUS_FILE=", "TEST_TOTAL_SHARDS=",
                                            "TEST_SHARD_INDEX=",       "HAL_CTS_IN_PROCESS=" };
    std::vector<std::string> env;
    for (char **e = environ; *e != nullptr; e++) {
        bool drop = std::strncmp(*e, "GTEST_", 6) == 0;
        for (const char *d : kDropped)
            drop = drop || std::strncmp(*e, d, std::strlen(d)) == 0;
        if (!drop)
            env.push_back(*e);
    }
    return env;
}

std::vector<char *> CStrings(std::vector<std::string> &strings)
{
    std::vector<char *> out;
    for (auto &s : strings)
        out.push_back(&s[0]);
    out.push_back(nullptr);
    return out;
}

// Starts the harness for one area in a process group of its own (so that a timeout also ends the
// rank and probe processes it started). Returns the pid, or -1 with errno set.
pid_t SpawnChild(const AreaConfig &config, int records_fd, const std::vector<std::string> &tests)
{
    std::vector<std::string> argv = { config.self_exe,
                                      "--cts-area-child=" + std::to_string(records_fd) };
    argv.insert(argv.end(), config.args.begin(), config.args.end());
    std::string filter = "--gtest_filter=";
    for (size_t i = 0; i < tests.size(); i++)
        filter += (i ? ":" : "") + tests[i];
    argv.push_back(filter);
    std::vector<std::string> env = ChildEnvironment();
    std::vector<char *> c_argv = CStrings(argv), c_env = CStrings(env);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigfillset(&defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = -1;
    int rc =
        posix_spawn(&pid, config.self_exe.c_str(), nullptr, &attr, c_argv.data(), c_env.data());
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    g_running_group = pid;
    return pid;
}

// Waits for the child until the deadline. Returns true when it ended by itself (*wstatus holds
// how), false when the deadline passed and its process group was killed.
bool WaitUntil(pid_t pid, double deadline, int *wstatus)
{
    for (;;) {
        pid_t w = waitpid(pid, wstatus, WNOHANG);
        if (w == pid) {
            kill(-pid, SIGKILL); // rank or probe processes it left behind
            g_running_group = 0;
            return true;
        }
        if (w < 0 && errno != EINTR) {
            *wstatus = 0;
            g_running_group = 0;
            return true;
        }
        if (NowSeconds() >= deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR) {
            }
            g_running_group = 0;
            return false;
        }
        struct timespec pause = { 0, 20 * 1000 * 1000 };
        nanosleep(&pause, nullptr);
    }
}

std::string ReadAll(int fd)
{
    std::string text;
    char buf[65536];
    if (lseek(fd, 0, SEEK_SET) != 0)
        return text;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return text;
        text.append(buf, static_cast<size_t>(n));
    }
}

// A records file nobody else can see: created and unlinked at once, inherited by the child.
int MakeRecordsFile()
{
    const char *base = std::getenv("TEST_TMPDIR");
    if (base == nullptr || base[0] == '\0')
        base = std::getenv("TMPDIR");
    if (base == nullptr || base[0] == '\0')
        base = "/tmp";
    std::string path = std::string(base) + "/cts-area-records.XXXXXX";
    int fd = mkstemp(&path[0]);
    if (fd >= 0)
        unlink(path.c_str());
    return fd;
}

std::string DescribeExit(int wstatus)
{
    if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    }
    if (WIFEXITED(wstatus))
        return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
    return "ended with wait status " + std::to_string(wstatus);
}

} // namespace

void DieWithParent()
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) // the parent is gone already
        _exit(1);
}

// ---- RecordWriter -----------------------------------------------------------------------------

void RecordWriter::Write(const std::vector<std::string> &fields)
{
    static std::mutex lock; // one record per write, in order
    std::string line;
    for (size_t i = 0; i < fields.size(); i++)
        line += (i ? "\t" : "") + Escape(fields[i]);
    line += '\n';
    std::lock_guard<std::mutex> guard(lock);
    const char *p = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = write(fd_, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n;
        left -= static_cast<size_t>(n);
    }
}

void RecordWriter::Started(const std::string &test)
{
    Write({ "S", test });
}

void RecordWriter::Failure(const std::string &test, const char *file, int line,
                           const std::string &message)
{
    Write({ "F", test, file != nullptr ? file : "", std::to_string(line), message });
}

void RecordWriter::Ended(const std::string &test, char result, bool known_failure,
                         const std::string &skip_reason)
{
    Write({ "E", test, std::string(1, result), known_failure ? "1" : "0", skip_reason });
}

void RecordWriter::TimedOut(const std::string &test, unsigned seconds)
{
    Write({ "T", test, std::to_string(seconds) });
}

// ---- AreaRunner -------------------------------------------------------------------------------

AreaRunner::AreaRunner(AreaConfig config) : config_(std::move(config))
{
    for (int sig : { SIGTERM, SIGINT, SIGHUP })
        signal(sig, EndRunningAreaAndDie);
}

void AreaRunner::Start(const testing::TestSuite &suite)
{
    std::vector<std::string> tests;
    for (int i = 0; i < suite.total_test_count(); i++) {
        const testing::TestInfo *info = suite.GetTestInfo(i);
        if (info->should_run())
            tests.push_back(std::string(info->test_suite_name()) + "." + info->name());
    }
    outcomes_.clear();
    if (!tests.empty())
        RunArea(suite.name(), tests);
}

Outcome AreaRunner::Find(const std::string &test) const
{
    auto it = outcomes_.find(test);
    if (it != outcomes_.end())
        return it->second;
    Outcome missing;
    missing.problems.push_back("the harness has no result for this test from its area's process");
    return missing;
}

void AreaRunner::RunArea(const std::string &area, const std::vector<std::string> &tests)
{
    const std::string timeout_text =
        std::to_string(config_.area_timeout_s) + " s (HAL_CTS_AREA_TIMEOUT)";
    double deadline = NowSeconds() + config_.area_timeout_s;
    std::vector<std::string> pending = tests;
    for (const auto &t : tests)
        outcomes_[t] = Outcome();

    auto not_run = [&](const std::vector<std::string> &names, const std::string &why) {
        for (const auto &t : names)
            outcomes_[t].problems.push_back("not run: " + why);
    };

    while (!pending.empty()) {
        if (NowSeconds() >= deadline) {
            not_run(pending, "area " + area + " used up its timeout of " + timeout_text);
            return;
        }
        int fd = MakeRecordsFile();
        pid_t pid = fd < 0 ? -1 : SpawnChild(config_, fd, pending);
        if (pid < 0) {
            not_run(pending,
                    "cannot start a process for area " + area + ": " + std::strerror(errno));
            if (fd >= 0)
                close(fd);
            return;
        }
        int wstatus = 0;
        bool exited = WaitUntil(pid, deadline, &wstatus);
        std::string records = ReadAll(fd);
        close(fd);

        // What this child reported.
        std::string in_flight, last_ended;
        bool any_failed = false;
        std::istringstream lines(records);
        std::string line;
        while (std::getline(lines, line)) {
            std::vector<std::string> f = Fields(line);
            if (f.size() < 2 || outcomes_.count(f[1]) == 0)
                continue;
            Outcome &o = outcomes_[f[1]];
            if (f[0] == "S") {
                o.state = Outcome::State::kStarted;
                in_flight = f[1];
            } else if (f[0] == "F" && f.size() >= 5) {
                o.failures.push_back({ f[2], std::atoi(f[3].c_str()), f[4] });
            } else if (f[0] == "E" && f.size() >= 5) {
                o.state = Outcome::State::kEnded;
                o.result = f[2].empty() ? 'F' : f[2][0];
                o.known_failure = f[3] == "1";
                o.skip_reason = f[4];
                any_failed = any_failed || o.result == 'F';
                last_ended = f[1];
                in_flight.clear();
            } else if (f[0] == "T" && f.size() >= 3) {
                o.state = Outcome::State::kTimedOut;
                o.problems.push_back("did not finish within " + f[2] +
                                     " s (HAL_CTS_TIMEOUT); its area's process was ended");
            }
        }

        std::vector<std::string> rest;
        for (const auto &t : pending)
            if (outcomes_[t].state == Outcome::State::kNotRun)
                rest.push_back(t);
        std::string death = "the process running area " + area + " " + DescribeExit(wstatus);

        if (!in_flight.empty()) {
            Outcome &o = outcomes_[in_flight];
            if (o.state == Outcome::State::kStarted)
                o.problems.push_back(
                    exited ? "crashed: " + death + " during this test (what it printed is above)"
                           : "timed out: area " + area + " did not finish within " + timeout_text +
                                 "; its process was killed during this test");
        } else if (exited && last_ended.empty()) {
            not_run(rest, death + " before it started a test (what it printed is above)");
            return;
        } else if (exited && !rest.empty()) {
            outcomes_[last_ended].problems.push_back(
                death + " after this test, before the next test of the area");
        } else if (exited) {
            int expected = any_failed ? 1 : 0;
            if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != expected)
                outcomes_[last_ended].problems.push_back(
                    death + " after its last test, which was this one, instead of " +
                    std::to_string(expected) +
                    " (a sanitizer's report or a crash at exit; what it printed is above)");
        }
        if (!exited) {
            not_run(rest, "area " + area + " did not finish within " + timeout_text);
            if (in_flight.empty() && rest.empty() && !last_ended.empty())
                outcomes_[last_ended].problems.push_back(
                    "area " + area + " did not finish within " + timeout_text +
                    "; its process was killed after this test");
            return;
        }
        pending = rest;
    }
}

} // namespace cts
