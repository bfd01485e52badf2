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

// BoolSwitch: the default where the variable is unset, the variable's value read on first use and
// then kept (a later setenv changes nothing: no getenv per call), overrides until reset to -1.
TEST(ModeSwitch, BoolSwitchReadsTheEnvironmentOnce) {
  unsetenv(kVar);
  switches::BoolSwitch unset_on{kVar, true};
  EXPECT_TRUE(unset_on.on());
  switches::BoolSwitch unset_off{kVar, false};
  EXPECT_FALSE(unset_off.on());
  setenv(kVar, "0", 1);
  EXPECT_TRUE(unset_on.on());  // read already: kept
  switches::BoolSwitch zero{kVar, true};
  EXPECT_FALSE(zero.on());
  setenv(kVar, "1", 1);
  EXPECT_FALSE(zero.on());
  zero.set_mode(1);
  EXPECT_TRUE(zero.on());
  zero.set_mode(0);
  EXPECT_FALSE(zero.on());
  zero.set_mode(5);  // clamped to 1
  EXPECT_TRUE(zero.on());
  zero.set_mode(-3);  // back to the environment's value as first read
  EXPECT_FALSE(zero.on());
  unsetenv(kVar);
}

}  // namespace
}  // namespace groupattn::test
