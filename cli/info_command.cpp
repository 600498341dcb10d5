// `tripath info`: what this build is and what it would run here. Prints the version, commit,
// build options, machine, every backend with its availability (and why not), what `auto` picks
// for MHA and MLA layers, and what TRIPATH_BACKEND / TRIPATH_MLA_BACKEND select now.
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "json_report.h"
#include "tripath/backend.h"
#include "tripath/error.h"

namespace tripath::cli {

namespace {

// A selection that may fail (no backend available, a bad environment value): the name or the
// library's explanation.
struct Selection {
  std::string name;
  std::string error;
};

Selection select_auto(bool mla) {
  Selection s;
  try {
    s.name = resolve_backend("auto", mla);
  } catch (const Error& e) {
    s.error = e.what();
  }
  return s;
}

Selection select_from_env(bool mla) {
  Selection s;
  try {
    s.name = backend_from_env(mla);
  } catch (const Error& e) {
    s.error = e.what();
  }
  return s;
}

const char* env_name(bool mla) { return mla ? "TRIPATH_MLA_BACKEND" : "TRIPATH_BACKEND"; }

nlohmann::json selection_json(const Selection& s) {
  nlohmann::json j;
  j["backend"] = s.name.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.name);
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

std::string selection_text(const Selection& s) {
  return s.error.empty() ? s.name : "error: " + s.error;
}

}  // namespace

int run_info(const std::vector<std::string>& args) {
  bool json = false;
  FlagSet flags("tripath info",
                "Prints the version, build options, machine, every backend with its "
                "availability, and the backends auto and the environment select.");
  flags.add_bool("json", &json, "print JSON instead of text");
  if (!flags.parse(args)) {
    std::cout << flags.usage();
    return 0;
  }

  const BuildInfo info = build_info();
  const std::vector<BackendInfo> backends = list_backends();
  const Selection auto_mha = select_auto(false), auto_mla = select_auto(true);
  const Selection env_mha = select_from_env(false), env_mla = select_from_env(true);
  const char* raw_mha = std::getenv(env_name(false));
  const char* raw_mla = std::getenv(env_name(true));

  if (json) {
    nlohmann::json doc;
    doc["version"] = info.version;
    doc["commit"] = git_commit();
    doc["build"] = build_info_json(info);
    doc["machine"] = machine_json(info);
    doc["variants"] = variants_json();
    doc["backends"] = nlohmann::json::array();
    for (const BackendInfo& b : backends) {
      doc["backends"].push_back({{"name", b.name},
                                 {"kind", b.is_mla ? "mla" : "mha"},
                                 {"available", b.available},
                                 {"reason", b.reason}});
    }
    doc["auto"] = {{"mha", selection_json(auto_mha)}, {"mla", selection_json(auto_mla)}};
    nlohmann::json env_mha_json = selection_json(env_mha);
    env_mha_json["value"] = raw_mha ? nlohmann::json(raw_mha) : nlohmann::json(nullptr);
    nlohmann::json env_mla_json = selection_json(env_mla);
    env_mla_json["value"] = raw_mla ? nlohmann::json(raw_mla) : nlohmann::json(nullptr);
    doc["env"] = {{env_name(false), env_mha_json}, {env_name(true), env_mla_json}};
    std::cout << doc.dump(2) << "\n";
    return 0;
  }

  std::cout << "tripath " << info.version << " (commit " << git_commit() << ")\n"
            << "build:    CUDA " << (info.with_cuda ? "yes" : "no");
  if (info.with_cuda) {
    std::cout << ", archs " << (info.cuda_archs.empty() ? "(none listed)" : info.cuda_archs);
    if (!info.cuda_specializations.empty()) {
      std::cout << "\n          kernels " << info.cuda_specializations;
    }
  }
  std::cout << "\n"
            << "threads:  " << info.num_threads << " (CPU reference)\n"
            << "cpu:      " << cpu_model_name() << "\n"
            << "gpu:      " << gpu_text(info) << "\n"
            << "\nbackends:\n";
  size_t width = 0;
  for (const BackendInfo& b : backends) width = std::max(width, b.name.size());
  for (const BackendInfo& b : backends) {
    std::cout << "  " << std::left << std::setw(static_cast<int>(width) + 2) << b.name
              << std::setw(5) << (b.is_mla ? "MLA" : "MHA")
              << (b.available ? "available" : "unavailable");
    if (!b.reason.empty()) std::cout << ": " << b.reason;
    std::cout << "\n";
  }
  std::cout << "\nselection:\n"
            << "  auto (MHA):          " << selection_text(auto_mha) << "\n"
            << "  auto (MLA):          " << selection_text(auto_mla) << "\n"
            << "  TRIPATH_BACKEND      " << (raw_mha ? std::string("=") + raw_mha : "unset")
            << " -> " << selection_text(env_mha) << "\n"
            << "  TRIPATH_MLA_BACKEND  " << (raw_mla ? std::string("=") + raw_mla : "unset")
            << " -> " << selection_text(env_mla) << "\n";
  std::cout << "\nkernel variants (read when a backend is created; unset takes the default):\n";
  for (const VariantVariable& v : variant_variables()) {
    const std::string value =
        v.value.empty() ? "unset -> " + std::to_string(v.default_value) : "=" + v.value;
    std::cout << "  " << std::left << std::setw(23) << v.name << std::setw(12) << value
              << v.backend << ": " << v.meaning << "\n";
  }
  return 0;
}

}  // namespace tripath::cli
