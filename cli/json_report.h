// What every report says about where and how it was made: the machine, the date, the commit and
// the build (BENCH.md: "Every report prints: GPU name, clocks if readable, commit, ..."), as
// JSON objects shared by `tripath info --json` and `tripath bench --json`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tripath/backend.h"

namespace tripath::cli {

// The commit the CLI was configured from ("unknown" outside a git checkout; "-dirty" appended
// when the tree had changes). Read at configure time: re-run cmake after committing.
const char* git_commit();
// "2025-01-31T12:34:56Z"
std::string utc_date_iso();
// The CPU model from /proc/cpuinfo, or "unknown".
std::string cpu_model_name();
// "NVIDIA H200 (132 SMs, sm_90)" or "none".
std::string gpu_text(const BuildInfo& info);

nlohmann::json build_info_json(const BuildInfo& info);
nlohmann::json machine_json(const BuildInfo& info);
// Every kernel-variant variable with the value the backends take now (its default when unset),
// {name: "digit"}: which kernels produced a report's figures.
nlohmann::json variants_json();
// "variants: TRIPATH_FLASH_OVERLAP=3, ...\n" for the variables set, or "" when none is.
std::string variants_text();

// Writes `doc` (indented) to `path`, or to stdout when path is "-". Throws tripath::Error if the
// file cannot be written.
void write_json(const std::string& path, const nlohmann::json& doc);

}  // namespace tripath::cli
