#include "flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace tripath::cli {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

namespace {

std::string number_text(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

bool parse_int(const std::string& text, long long* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *value = v;
  return true;
}

// Accepts decimals and simple fractions ("0.015625", "1/64").
bool parse_double(const std::string& text, double* value) {
  if (text.empty()) return false;
  const size_t slash = text.find('/');
  if (slash != std::string::npos) {
    double num = 0.0, den = 0.0;
    if (!parse_double(text.substr(0, slash), &num) || !parse_double(text.substr(slash + 1), &den) ||
        den == 0.0) {
      return false;
    }
    *value = num / den;
    return true;
  }
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *value = v;
  return true;
}

}  // namespace

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

FlagSet::Flag& FlagSet::add(const std::string& name, const std::string& hint,
                            const std::string& help, const std::string& default_text,
                            bool is_bool) {
  Flag f;
  f.name = name;
  f.hint = hint;
  f.help = help;
  f.default_text = default_text;
  f.is_bool = is_bool;
  flags_.push_back(std::move(f));
  return flags_.back();
}

void FlagSet::add_bool(const std::string& name, bool* target, const std::string& help) {
  Flag& f = add(name, "", help, *target ? "on" : "", true);
  f.assign = [target](const std::string& v) -> std::string {
    if (v == "true" || v == "1" || v == "on" || v == "yes") {
      *target = true;
    } else if (v == "false" || v == "0" || v == "off" || v == "no") {
      *target = false;
    } else {
      return "true or false (or the flag alone for true)";
    }
    return "";
  };
}

void FlagSet::add_string(const std::string& name, std::string* target, const std::string& hint,
                         const std::string& help) {
  Flag& f = add(name, hint, help, *target, false);
  f.assign = [target, hint](const std::string& v) -> std::string {
    if (v.empty()) return "a non-empty " + hint;
    *target = v;
    return "";
  };
}

void FlagSet::add_choice(const std::string& name, std::string* target,
                         const std::vector<std::string>& choices, const std::string& help) {
  add_choice(name, target, choices, join(choices, "|"), help);
}

void FlagSet::add_choice(const std::string& name, std::string* target,
                         const std::vector<std::string>& choices, const std::string& hint,
                         const std::string& help) {
  Flag& f = add(name, hint, help, *target, false);
  f.assign = [target, choices](const std::string& v) -> std::string {
    if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
      return "one of " + join(choices, ", ");
    }
    *target = v;
    return "";
  };
}

void FlagSet::add_int(const std::string& name, long long* target, long long min, long long max,
                      const std::string& help) {
  Flag& f = add(name, "N", help, std::to_string(*target), false);
  f.assign = [target, min, max](const std::string& v) -> std::string {
    long long value = 0;
    if (!parse_int(v, &value) || value < min || value > max) {
      return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    }
    *target = value;
    return "";
  };
}

void FlagSet::add_double(const std::string& name, double* target, double min_exclusive, double max,
                         const std::string& help) {
  Flag& f = add(name, "F", help, number_text(*target), false);
  f.assign = [target, min_exclusive, max](const std::string& v) -> std::string {
    double value = 0.0;
    if (!parse_double(v, &value) || !(value > min_exclusive) || value > max) {
      return "a number in (" + number_text(min_exclusive) + ", " + number_text(max) +
             "], as a decimal or a fraction like 1/64";
    }
    *target = value;
    return "";
  };
}

FlagSet::Flag* FlagSet::find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::was_set(const std::string& name) const {
  const Flag* f = find(name);
  return f != nullptr && f->set;
}

void FlagSet::set_default_text(const std::string& name, const std::string& text) {
  if (Flag* f = find(name)) f->default_text = text;
}

UsageError FlagSet::error(const std::string& message) const {
  return UsageError(command_ + ": " + message, usage());
}

bool FlagSet::parse(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return false;
  }
  for (const std::string& arg : args) {
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      throw error("unexpected argument '" + arg + "': flags take the form --name=value");
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    Flag* f = find(name);
    if (f == nullptr) {
      std::vector<std::string> names;
      for (const Flag& g : flags_) names.push_back("--" + g.name);
      names.push_back("--help");
      throw error("unknown flag '--" + name + "'; valid flags: " + join(names, ", "));
    }
    if (f->set) throw error("flag --" + name + " given twice");
    std::string value;
    if (eq == std::string::npos) {
      if (!f->is_bool) {
        throw error("flag --" + name + " needs a value: --" + name + "=" + f->hint);
      }
      value = "true";
    } else {
      value = arg.substr(eq + 1);
    }
    const std::string expected = f->assign(value);
    if (!expected.empty()) {
      throw error("invalid value '" + value + "' for --" + name + ": expected " + expected);
    }
    f->set = true;
  }
  return true;
}

std::string FlagSet::usage() const {
  std::ostringstream s;
  s << "usage: " << command_ << " [flags]\n" << summary_ << "\n\nflags:\n";
  std::vector<std::string> lefts;
  size_t width = 0;
  for (const Flag& f : flags_) {
    std::string left = "  --" + f.name + (f.is_bool ? "" : "=" + f.hint);
    width = std::max(width, left.size());
    lefts.push_back(left);
  }
  const std::string help_left = "  --help";
  width = std::max(width, help_left.size());
  for (size_t i = 0; i < flags_.size(); ++i) {
    const Flag& f = flags_[i];
    s << lefts[i] << std::string(width + 2 - lefts[i].size(), ' ') << f.help;
    if (!f.default_text.empty()) s << " (default: " << f.default_text << ")";
    s << "\n";
  }
  s << help_left << std::string(width + 2 - help_left.size(), ' ') << "print this help and exit\n";
  return s.str();
}

}  // namespace tripath::cli
