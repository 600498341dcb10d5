// The one place that knows every backend name, whether it is available here and why not, and
// how to construct it. Explicit registration: static self-registration gets dropped by linkers.
#include <cstdlib>
#include <string>

#include "../reference/reference_backend.h"
#ifdef TRIPATH_WITH_CUDA
#include "../backends/cuda/cuda_entry.h"
#include "../backends/cuda/mla_backends.h"
#endif
#include "tripath/backend.h"
#include "tripath/error.h"

namespace tripath {
namespace {

struct Entry {
  const char* name;
  bool is_mla;
  bool needs_cuda;
  bool implemented;  // false: named by the design, its kernels not written yet
};

constexpr Entry kBackends[] = {
    {"three_path", false, true, true},  {"unified", false, true, true},
    {"two_path", false, true, true},    {"reference", false, false, true},
    {"mla", true, true, true},          {"mla_baseline", true, true, true},
    {"reference", true, false, true},
};

std::string unavailable_reason(const Entry& e, const BuildInfo& info) {
  if (!e.needs_cuda) return "";
  if (!info.with_cuda) return "not built with CUDA (configure with -DTRIPATH_CUDA=ON)";
  if (!info.gpu_found) return "no CUDA GPU found";
  if (!e.implemented) return "not implemented yet in this version";
  return "";
}

std::string names_text(bool mla, bool available_only, const std::vector<BackendInfo>& all) {
  std::string s = "auto";
  for (const BackendInfo& b : all) {
    if (b.is_mla != mla || (available_only && !b.available)) continue;
    s += ", " + b.name;
  }
  return s;
}

}  // namespace

void AttentionBackend::check_supported(const AttentionParams& params,
                                       const KvCacheConfig& cache) const {
  params.validate(cache);
}

std::vector<BackendInfo> list_backends() {
  const BuildInfo info = build_info();
  std::vector<BackendInfo> out;
  for (const Entry& e : kBackends) {
    BackendInfo b;
    b.name = e.name;
    b.is_mla = e.is_mla;
    b.reason = unavailable_reason(e, info);
    b.available = b.reason.empty();
    out.push_back(b);
  }
  return out;
}

std::string resolve_backend(std::string_view name, bool mla) {
  const std::vector<BackendInfo> all = list_backends();
  const char* variable = mla ? "TRIPATH_MLA_BACKEND" : "TRIPATH_BACKEND";
  if (name == "auto") {
    // shared/DESIGN.md section 7: Hopper -> three_path / mla; another CUDA GPU -> what runs
    // there; no GPU -> reference. The first available name in preference order wins.
    const BuildInfo info = build_info();
    std::vector<std::string> prefer;
    if (info.gpu_found && info.gpu_compute_capability / 10 == 9)
      prefer = mla ? std::vector<std::string>{"mla"} : std::vector<std::string>{"three_path"};
    if (info.gpu_found) prefer.push_back(mla ? "mla_baseline" : "unified");
    for (const std::string& pick : prefer)
      for (const BackendInfo& b : all)
        if (b.is_mla == mla && b.name == pick && b.available) return pick;
    return "reference";
  }
  for (const BackendInfo& b : all) {
    if (b.is_mla != mla || b.name != name) continue;
    if (b.available) return b.name;
    std::string why;
    for (const BackendInfo& o : all)
      if (o.is_mla == mla && !o.available && o.name != name) why += "; " + o.name + ": " + o.reason;
    throw Error("tripath: " + std::string(mla ? "MLA" : "attention") + " backend '" +
                std::string(name) + "' is not available here (" + b.reason +
                "); available: " + names_text(mla, true, all) + why);
  }
  throw Error("tripath: unknown " + std::string(mla ? "MLA" : "attention") + " backend '" +
              std::string(name) + "' (" + variable + "); valid names: " +
              names_text(mla, false, all) + "; available here: " + names_text(mla, true, all));
}

std::string backend_from_env(bool mla) {
  const char* value = std::getenv(mla ? "TRIPATH_MLA_BACKEND" : "TRIPATH_BACKEND");
  return resolve_backend(value != nullptr && *value != '\0' ? value : "auto", mla);
}

std::unique_ptr<AttentionBackend> create_attention_backend(std::string_view name) {
  const std::string resolved = resolve_backend(name, false);
  if (resolved == "reference") return make_reference_attention_backend();
#ifdef TRIPATH_WITH_CUDA
  if (resolved == "unified") return make_unified_backend();
  if (resolved == "two_path") return make_two_path_backend();
  if (resolved == "three_path") return make_three_path_backend();
#endif
  throw Error("tripath: attention backend '" + resolved + "' has no implementation in this build");
}

std::unique_ptr<MlaBackend> create_mla_backend(std::string_view name) {
  const std::string resolved = resolve_backend(name, true);
  if (resolved == "reference") return make_reference_mla_backend();
#ifdef TRIPATH_WITH_CUDA
  if (resolved == "mla") return make_mla_backend();
  if (resolved == "mla_baseline") return make_mla_baseline_backend();
#endif
  throw Error("tripath: MLA backend '" + resolved + "' has no implementation in this build");
}

}  // namespace tripath
