// SPDX-License-Identifier: Apache-2.0
// Conformance harness: each area in a child process of its own.
//
// By default the harness (the parent) runs no test body itself. When GoogleTest reaches an area
// (a test suite: memory, stream, comm, ...), the parent starts the harness executable again for
// the area's selected tests (--cts-area-child=FD and an exact --gtest_filter) and waits for it
// under the area's timeout. The child runs the tests in-process, as the in-process mode does,
// prints only what the bodies and the sanitizers print, and writes one record per event to FD: a
// test started, a failure (file, line, message), a test ended (passed, failed or skipped, with the
// skip reason and the known-failure flag), a test timed out. The parent then reports every test of
// the area from those records, so its own GoogleTest output (console, JUnit XML, JSON) and its
// summary hold every test. A test during which the child died fails with the signal or exit status;
// the remaining tests of the area run in a new child. Tests the area's timeout left unrun fail with
// "not run". Sharding (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX) is applied by the parent's GoogleTest
// before any area starts: a child runs exactly the tests of its area that the shard selected.
#ifndef CONFORMANCE_AREAS_H
#define CONFORMANCE_AREAS_H

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace cts
{

// ---- Child side: the records ------------------------------------------------------------------

// In an area's child process: die with the parent (a killed parent leaves no area running).
void DieWithParent();

// Writes the records of a child process to a file descriptor. Every record is written whole
// with one write(2) as soon as the event happens, so the records of a child that dies are kept
// up to its last event. Thread safety: safe.
class RecordWriter
{
  public:
    explicit RecordWriter(int fd) : fd_(fd) {}
    void Started(const std::string &test);
    void Failure(const std::string &test, const char *file, int line, const std::string &message);
    // result: 'P' passed, 'F' failed, 'S' skipped.
    void Ended(const std::string &test, char result, bool known_failure,
               const std::string &skip_reason);
    // The per-test watchdog fired; the child exits next.
    void TimedOut(const std::string &test, unsigned seconds);

  private:
    void Write(const std::vector<std::string> &fields);
    int fd_;
};

// ---- Parent side: running an area and what it reported ----------------------------------------

struct Failure {
    std::string file;
    int line = 0;
    std::string message;
};

// One test as the parent reports it.
struct Outcome {
    enum class State { kNotRun, kStarted, kTimedOut, kEnded };
    State state = State::kNotRun;
    char result = 'F'; // of an ended test: 'P', 'F' or 'S'
    bool known_failure = false;
    std::string skip_reason;
    std::vector<Failure> failures;     // what the test body reported
    std::vector<std::string> problems; // what the harness adds: a crash, a timeout, not run
};

struct AreaConfig {
    std::string self_exe;          // the harness executable
    std::vector<std::string> args; // the harness's own flags, for every child
    unsigned area_timeout_s = 0;   // the whole area, every child it takes
};

// A listener that runs each test suite (area) in child processes when GoogleTest starts it,
// and keeps what the children reported for the fixture to replay. Thread safety: GoogleTest's
// listener thread only.
class AreaRunner : public testing::EmptyTestEventListener
{
  public:
    // Also makes SIGTERM, SIGINT and SIGHUP (a test runner's timeout, ^C) end the running
    // area's process group before they end this process.
    explicit AreaRunner(AreaConfig config);
    // GoogleTest calls the legacy OnTestCaseStart of every listener after OnTestSuiteStart, and
    // its console printer prints the suite's line there: run the area after that line.
#ifndef GTEST_REMOVE_LEGACY_TEST_CASEAPI_
    void OnTestCaseStart(const testing::TestSuite &suite) override
    {
        Start(suite);
    }
#else
    void OnTestSuiteStart(const testing::TestSuite &suite) override
    {
        Start(suite);
    }
#endif
    // What the area's children reported for a test; a test the runner never heard of yields a
    // not-run outcome with a reason.
    Outcome Find(const std::string &test) const;

  private:
    void Start(const testing::TestSuite &suite);
    void RunArea(const std::string &area, const std::vector<std::string> &tests);
    AreaConfig config_;
    std::map<std::string, Outcome> outcomes_;
};

} // namespace cts

#endif // CONFORMANCE_AREAS_H
