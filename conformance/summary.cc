// SPDX-License-Identifier: Apache-2.0
// The conformance harness's bookkeeping of outcomes and its summary (summary.h).
#include "conformance/summary.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cts
{
namespace
{

struct Counts {
    unsigned passed = 0, failed = 0, skipped = 0, known = 0;
};

struct TestNote {
    std::string backend, area;
    bool known_failure = false; // skipped (or, when run anyway, attempted) as a known failure
    std::string skip_reason;
};

std::mutex g_summary_lock;
std::map<std::string, TestNote> g_notes;                       // by full test name
std::map<std::string, std::map<std::string, Counts>> g_counts; // backend -> area -> counts
std::map<std::string, unsigned> g_skip_reasons;
std::vector<std::string> g_now_passing; // known failures that passed when run anyway
std::vector<std::string> g_failed_tests;

} // namespace

std::string FullName(const testing::TestInfo &info)
{
    std::string name = std::string(info.test_suite_name()) + "." + info.name();
    return name;
}

void PrintSummary(FILE *out)
{
    std::lock_guard<std::mutex> lock(g_summary_lock);
    Counts all;
    for (const auto &b : g_counts) {
        std::fprintf(out, "\n## Conformance summary: %s\n\n", b.first.c_str());
        std::fprintf(out, "| area | passed | failed | skipped | known failures |\n");
        std::fprintf(out, "|---|---:|---:|---:|---:|\n");
        Counts total;
        for (const auto &a : b.second) {
            const Counts &c = a.second;
            std::fprintf(out, "| %s | %u | %u | %u | %u |\n", a.first.c_str(), c.passed, c.failed,
                         c.skipped, c.known);
            total.passed += c.passed;
            total.failed += c.failed;
            total.skipped += c.skipped;
            total.known += c.known;
        }
        std::fprintf(out, "| **total** | %u | %u | %u | %u |\n", total.passed, total.failed,
                     total.skipped, total.known);
        all.passed += total.passed;
        all.failed += total.failed;
        all.skipped += total.skipped;
        all.known += total.known;
    }
    if (!g_skip_reasons.empty()) {
        std::fprintf(out, "\nSkip reasons:\n");
        for (const auto &r : g_skip_reasons)
            std::fprintf(out, "- %u x %s\n", r.second, r.first.c_str());
    }
    if (!g_now_passing.empty()) {
        std::fprintf(out, "\nKnown failures that now pass (remove their CTS_KNOWN_FAILURE_ON):\n");
        for (const auto &n : g_now_passing)
            std::fprintf(out, "- %s\n", n.c_str());
    }
    if (!g_failed_tests.empty()) {
        std::fprintf(out, "\nFailed:\n");
        for (const auto &n : g_failed_tests)
            std::fprintf(out, "- %s\n", n.c_str());
    }
    // Known-failure skips are listed in their own column, and are skips in the closing line.
    std::fprintf(out, "\n%u passed, %u failed, %u skipped\n", all.passed, all.failed,
                 all.skipped + all.known);
    std::fflush(out);
}

void NoteTest(const std::string &name, const std::string &backend, const std::string &area)
{
    std::lock_guard<std::mutex> lock(g_summary_lock);
    TestNote &note = g_notes[name];
    note.backend = backend;
    note.area = area;
}

void NoteOutcome(const std::string &name, bool known_failure, const char *skip_reason)
{
    std::lock_guard<std::mutex> lock(g_summary_lock);
    TestNote &note = g_notes[name];
    note.known_failure = known_failure;
    if (skip_reason != nullptr)
        note.skip_reason = skip_reason;
}

void CountTimedOut(const std::string &name)
{
    std::lock_guard<std::mutex> lock(g_summary_lock);
    auto it = g_notes.find(name);
    std::string backend = it != g_notes.end() ? it->second.backend : "?";
    std::string area = it != g_notes.end() ? it->second.area : "?";
    g_counts[backend][area].failed++;
    g_failed_tests.push_back(name + " (timeout)");
}

namespace
{

class SummaryListener : public testing::EmptyTestEventListener
{
    void OnTestEnd(const testing::TestInfo &info) override
    {
        const testing::TestResult *result = info.result();
        std::lock_guard<std::mutex> lock(g_summary_lock);
        std::string name = FullName(info);
        TestNote note;
        auto it = g_notes.find(name);
        if (it != g_notes.end()) {
            note = it->second;
        } else {
            note.area = info.test_suite_name();
            note.backend = "?";
        }
        Counts &c = g_counts[note.backend][note.area];
        if (result->Failed()) {
            c.failed++;
            g_failed_tests.push_back(name);
        } else if (result->Skipped()) {
            if (note.known_failure) {
                c.known++;
            } else {
                c.skipped++;
                g_skip_reasons[note.skip_reason]++;
            }
        } else {
            c.passed++;
            if (note.known_failure)
                g_now_passing.push_back(name);
        }
    }
};

// In an area's child process: every event of every test, as records for the parent.
class RecordListener : public testing::EmptyTestEventListener
{
  public:
    explicit RecordListener(RecordWriter *records) : records_(records) {}

  private:
    void OnTestStart(const testing::TestInfo &info) override
    {
        current_ = FullName(info);
        records_->Started(current_);
    }
    // Called with GoogleTest's own lock held: no UnitTest query here (current_test_info would
    // deadlock).
    void OnTestPartResult(const testing::TestPartResult &part) override
    {
        if (part.failed())
            records_->Failure(current_, part.file_name(), part.line_number(), part.message());
    }
    void OnTestEnd(const testing::TestInfo &info) override
    {
        std::string name = FullName(info);
        TestNote note;
        {
            std::lock_guard<std::mutex> lock(g_summary_lock);
            auto it = g_notes.find(name);
            if (it != g_notes.end())
                note = it->second;
        }
        const testing::TestResult *result = info.result();
        char outcome = result->Failed() ? 'F' : result->Skipped() ? 'S' : 'P';
        records_->Ended(name, outcome, note.known_failure, note.skip_reason);
    }

    RecordWriter *records_;
    std::string current_; // the test running now (GoogleTest runs one at a time)
};

} // namespace

testing::TestEventListener *NewSummaryListener()
{
    return new SummaryListener;
}

testing::TestEventListener *NewRecordListener(RecordWriter *records)
{
    return new RecordListener(records);
}

} // namespace cts
