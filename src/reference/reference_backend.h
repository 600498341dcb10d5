// The CPU reference as a registered backend (name "reference" for MHA and for MLA).
#pragma once

#include <memory>

#include "tripath/backend.h"

namespace tripath {

std::unique_ptr<AttentionBackend> make_reference_attention_backend();
std::unique_ptr<MlaBackend> make_reference_mla_backend();

}  // namespace tripath
