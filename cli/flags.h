// A small `--name=value` flag parser for the tripath subcommands. Each subcommand declares its
// flags with a target variable, a value hint and a help line; parse() fills the targets and
// reports mistakes as UsageError (main turns that into the message, the usage and exit code 2).
// `--help` / `-h` is understood by every FlagSet. Boolean flags take no value (`--verify`) or an
// explicit one (`--verify=false`); every other flag needs `=value`: `--name value` is refused so
// a forgotten `=` cannot silently swallow the next flag.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tripath::cli {

// A mistake on the command line: exit code 2 with the message and the subcommand's usage.
class UsageError : public std::runtime_error {
 public:
  UsageError(const std::string& message, std::string usage)
      : std::runtime_error(message), usage_(std::move(usage)) {}
  const std::string& usage() const { return usage_; }

 private:
  std::string usage_;
};

class FlagSet {
 public:
  // `command` as typed ("tripath bench"), `summary` one line on what it does.
  FlagSet(std::string command, std::string summary);

  void add_bool(const std::string& name, bool* target, const std::string& help);
  void add_string(const std::string& name, std::string* target, const std::string& hint,
                  const std::string& help);
  // Value must be one of `choices`; the usage shows them as a|b|c unless a `hint` is given.
  void add_choice(const std::string& name, std::string* target,
                  const std::vector<std::string>& choices, const std::string& help);
  void add_choice(const std::string& name, std::string* target,
                  const std::vector<std::string>& choices, const std::string& hint,
                  const std::string& help);
  void add_int(const std::string& name, long long* target, long long min, long long max,
               const std::string& help);
  void add_double(const std::string& name, double* target, double min_exclusive, double max,
                  const std::string& help);

  // Parses `args` (everything after the subcommand). Returns false when --help was given (the
  // caller prints usage() and exits 0). Throws UsageError on an unknown flag, a missing or bad
  // value, a repeated flag or a positional argument.
  bool parse(const std::vector<std::string>& args);
  bool was_set(const std::string& name) const;
  // Replaces the "(default: ...)" text of a flag in the usage.
  void set_default_text(const std::string& name, const std::string& text);

  std::string usage() const;
  // A UsageError for a value the command itself rejects after parsing (e.g. a backend name).
  UsageError error(const std::string& message) const;

 private:
  struct Flag {
    std::string name;
    std::string hint;  // "NAME", "N", "bf16|f16|..." shown in the usage; empty for bool
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool set = false;
    // Converts and stores the value; returns an empty string or what was expected.
    std::function<std::string(const std::string&)> assign;
  };
  Flag& add(const std::string& name, const std::string& hint, const std::string& help,
            const std::string& default_text, bool is_bool);
  Flag* find(const std::string& name);
  const Flag* find(const std::string& name) const;

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
};

// "a, b, c" / "a|b|c"
std::string join(const std::vector<std::string>& items, const std::string& separator);
// Splits a comma-separated flag value; empty items are dropped.
std::vector<std::string> split_list(const std::string& text);

}  // namespace tripath::cli
