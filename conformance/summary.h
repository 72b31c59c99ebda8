// SPDX-License-Identifier: Apache-2.0
// The conformance harness's bookkeeping of outcomes: what each test is (backend, area), how it
// ended, and the per-area Markdown summary that ends with "N passed, N failed, N skipped".
// Thread safety: every function is safe (one lock).
#ifndef CONFORMANCE_SUMMARY_H
#define CONFORMANCE_SUMMARY_H

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "conformance/areas.h"

namespace cts
{

// "area.test/param", the name tests are reported under.
std::string FullName(const testing::TestInfo &info);

// Which backend and area a test belongs to (before it runs).
void NoteTest(const std::string &name, const std::string &backend, const std::string &area);
// How it ended besides pass/fail: a known failure, and why it skipped (reason may be NULL).
void NoteOutcome(const std::string &name, bool known_failure, const char *skip_reason);
// A test the watchdog gave up on: counted as failed.
void CountTimedOut(const std::string &name);

// The Markdown table per backend and area, skip reasons, known failures that now pass, failed
// tests, and the closing line.
void PrintSummary(FILE *out);

// Counts every test's result for the summary (the process that reports: in-process, or the
// parent of the areas' children).
testing::TestEventListener *NewSummaryListener();
// In an area's child process: sends every event of every test to the parent as records.
testing::TestEventListener *NewRecordListener(RecordWriter *records);

} // namespace cts

#endif // CONFORMANCE_SUMMARY_H
