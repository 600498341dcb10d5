#include "json_report.h"

#include <ctime>
#include <fstream>
#include <iostream>
#include <thread>

#include "tripath/error.h"

#ifndef TRIPATH_GIT_COMMIT
#define TRIPATH_GIT_COMMIT "unknown"
#endif

namespace tripath::cli {

const char* git_commit() { return TRIPATH_GIT_COMMIT; }

std::string utc_date_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const size_t begin = line.find_first_not_of(" \t", colon + 1);
        if (begin != std::string::npos) return line.substr(begin);
      }
    }
  }
  return "unknown";
}

std::string gpu_text(const BuildInfo& info) {
  if (!info.gpu_found) return "none";
  return info.gpu_name + " (" + std::to_string(info.gpu_sm_count) + " SMs, sm_" +
         std::to_string(info.gpu_compute_capability) + ", " +
         std::to_string(info.gpu_memory_bytes >> 30) + " GiB)";
}

nlohmann::json variants_json() {
  nlohmann::json j = nlohmann::json::object();
  for (const VariantVariable& v : variant_variables()) {
    j[v.name] = v.value.empty() ? std::to_string(v.default_value) : v.value;
  }
  return j;
}

std::string variants_text() {
  std::string text;
  for (const VariantVariable& v : variant_variables()) {
    if (!v.value.empty()) text += (text.empty() ? "variants: " : ", ") + v.name + "=" + v.value;
  }
  return text.empty() ? text : text + "\n";
}

nlohmann::json build_info_json(const BuildInfo& info) {
  nlohmann::json j;
  j["version"] = info.version;
  j["with_cuda"] = info.with_cuda;
  j["cuda_archs"] = info.cuda_archs;
  j["num_threads"] = info.num_threads;
  j["gpu_found"] = info.gpu_found;
  j["gpu_name"] = info.gpu_name;
  j["gpu_sm_count"] = info.gpu_sm_count;
  j["gpu_compute_capability"] = info.gpu_compute_capability;
  j["gpu_memory_bytes"] = info.gpu_memory_bytes;
  j["cuda_specializations"] = info.cuda_specializations;
  return j;
}

nlohmann::json machine_json(const BuildInfo& info) {
  nlohmann::json j;
  j["device"] = info.gpu_found ? "gpu" : "cpu";
  j["cpu"] = cpu_model_name();
  j["logical_cpus"] = std::thread::hardware_concurrency();
  j["threads"] = info.num_threads;
  if (info.gpu_found) {
    j["gpu"] = info.gpu_name;
    j["gpu_sm_count"] = info.gpu_sm_count;
    j["gpu_compute_capability"] = info.gpu_compute_capability;
    j["gpu_memory_bytes"] = info.gpu_memory_bytes;
  } else {
    j["gpu"] = nullptr;
  }
  return j;
}

void write_json(const std::string& path, const nlohmann::json& doc) {
  if (path == "-") {
    std::cout << doc.dump(2) << "\n";
    return;
  }
  std::ofstream out(path);
  if (!out) throw Error("cannot open '" + path + "' for writing the JSON report");
  out << doc.dump(2) << "\n";
  if (!out) throw Error("failed writing the JSON report to '" + path + "'");
}

}  // namespace tripath::cli
