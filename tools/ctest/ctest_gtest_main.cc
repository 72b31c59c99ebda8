// SPDX-License-Identifier: Apache-2.0
// Registers every CTEST as a GoogleTest case and runs them.
#include <gtest/gtest.h>

#include "tools/ctest/ctest_registry.h"

namespace
{

class CTestCase : public testing::Test
{
  public:
    explicit CTestCase(ctest_fn fn) : fn_(fn) {}
    void TestBody() override
    {
        ctest_skip_reason[0] = '\0';
        ctest_take_failures();
        int result = fn_();
        int recorded = ctest_take_failures();
        EXPECT_EQ(0, recorded) << "the C test body's expectations failed (see stderr above)";
        if (result == CTEST_SKIP && recorded == 0) {
            GTEST_SKIP() << ctest_skip_reason;
        } else if (result != CTEST_SKIP) {
            EXPECT_EQ(CTEST_PASS, result)
                << "the C test body reported a failure (see stderr above)";
        }
    }

  private:
    ctest_fn fn_;
};

} // namespace

int main(int argc, char **argv)
{
    for (size_t i = 0; i < ctest_entry_count; i++) {
        const ctest_entry_t &e = ctest_entries[i];
        ctest_fn fn = e.fn;
        testing::RegisterTest(e.suite, e.name, nullptr, nullptr, e.file, e.line,
                              [fn]() -> testing::Test * { return new CTestCase(fn); });
    }
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
