// The whole public API. Includable without CUDA headers.
#pragma once

#include "groupattn/attention.h"
#include "groupattn/engines.h"
#include "groupattn/kda.h"
#include "groupattn/run_options.h"
#include "groupattn/status.h"
#include "groupattn/supported.h"
#include "groupattn/tensor.h"
