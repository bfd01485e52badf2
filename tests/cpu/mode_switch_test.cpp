// core/mode_switch.h: the measurement switches' helpers (environment read as given, test overrides
// win until reset to -1), boolean and integer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "core/mode_switch.h"

namespace groupattn::test {
namespace {

constexpr const char* kVar = "GROUPATTN_TEST_MODE_SWITCH";

TEST(ModeSwitch, EnvironmentValues) {
  unsetenv(kVar);
  EXPECT_EQ(switches::env_mode(kVar), -1);
  EXPECT_TRUE(switches::env_switch(kVar, true));
  EXPECT_FALSE(switches::env_switch(kVar, false));
  EXPECT_EQ(switches::env_int(kVar, 3), 3);
  setenv(kVar, "0", 1);
  EXPECT_EQ(switches::env_mode(kVar), 0);
  EXPECT_FALSE(switches::env_switch(kVar, true));
  EXPECT_EQ(switches::env_int(kVar, 3), 0);
  setenv(kVar, "2", 1);
  EXPECT_EQ(switches::env_mode(kVar), 1);
  EXPECT_TRUE(switches::env_switch(kVar, false));
  EXPECT_EQ(switches::env_int(kVar, 3), 2);
  unsetenv(kVar);
}

TEST(ModeSwitch, OverridesWinUntilReset) {
  std::atomic<int> mode{-1};
  EXPECT_TRUE(switches::switch_value(mode, true));
  EXPECT_EQ(switches::switch_int(mode, 3), 3);
  EXPECT_FALSE(switches::switch_value_or(mode, -1, false));
  EXPECT_TRUE(switches::switch_value_or(mode, 1, false));
  mode.store(switches::clamp_mode(0));
  EXPECT_FALSE(switches::switch_value(mode, true));
  EXPECT_EQ(switches::switch_int(mode, 3), 0);
  EXPECT_FALSE(switches::switch_value_or(mode, 1, true));
  mode.store(switches::clamp_mode(7));
  EXPECT_EQ(mode.load(), 1);
  EXPECT_TRUE(switches::switch_value(mode, false));
  mode.store(2);
  EXPECT_EQ(switches::switch_int(mode, 3), 2);
  mode.store(switches::clamp_mode(-5));
  EXPECT_EQ(mode.load(), -1);
  EXPECT_EQ(switches::switch_int(mode, 3), 3);
}

}  // namespace
}  // namespace groupattn::test
