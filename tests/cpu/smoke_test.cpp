#include <gtest/gtest.h>

#include "groupattn/groupattn.h"

TEST(Smoke, EnginesListed) { EXPECT_FALSE(groupattn::list_engines(groupattn::Op::kAttention).empty()); }
