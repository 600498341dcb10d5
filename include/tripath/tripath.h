// The whole public API of tripath.
#pragma once

#include "tripath/attention.h"
#include "tripath/backend.h"
#include "tripath/block_allocator.h"
#include "tripath/device.h"
#include "tripath/dtype.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"
#include "tripath/reference.h"
#include "tripath/step_plan.h"
#include "tripath/tensor.h"
