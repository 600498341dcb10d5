// `tripath serve` flags: the published-form defaults, --quick on a CPU and on a GPU, explicit
// flags winning over --quick, and every usage mistake refused with a message naming the flag
// (main turns UsageError into exit code 2; cli/CMakeLists.txt checks that end to end).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "flags.h"
#include "serve_options.h"

namespace tripath::cli {
namespace {

TEST(ServeOptions, PublishedFormByDefault) {
  const ParsedServeOptions p = parse_serve_options({}, true);
  const ServeOptions& o = p.options;
  EXPECT_FALSE(p.help);
  EXPECT_EQ(o.models, (std::vector<std::string>{"qwen3-235b-tp8", "deepseek-r1-tp8"}));
  EXPECT_EQ(o.isl, 10240);
  EXPECT_EQ(o.osl, 1024);
  EXPECT_EQ(o.concurrency, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(o.max_batched_tokens, 16384);
  EXPECT_EQ(o.layers, 0);  // the preset's
  EXPECT_EQ(o.requests_per_client, 1);
  EXPECT_EQ(o.traces, (std::vector<TraceKind>{TraceKind::kUniform}));
  EXPECT_EQ(o.sharegpt_isl, 8000);
  EXPECT_EQ(o.sharegpt_osl, 1500);
  EXPECT_TRUE(o.cuda_graphs);
  EXPECT_FALSE(o.linear);
  EXPECT_EQ(o.layout, "tiled");  // three_path's decode reads it by bulk copies
  EXPECT_EQ(parse_serve_options({"--layout=nhd"}, true).options.layout, "nhd");
}

TEST(ServeOptions, QuickOnCpuAndGpu) {
  const ServeOptions cpu = parse_serve_options({"--quick"}, false).options;
  EXPECT_EQ(cpu.isl, 512);
  EXPECT_EQ(cpu.osl, 32);
  EXPECT_EQ(cpu.concurrency, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(cpu.layers, 2);
  EXPECT_EQ(cpu.requests_per_client, 2);
  const ServeOptions gpu = parse_serve_options({"--quick"}, true).options;
  EXPECT_EQ(gpu.isl, 4096);
  EXPECT_EQ(gpu.concurrency, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(gpu.layers, 0);
  // Explicit flags win over --quick.
  const ServeOptions mixed =
      parse_serve_options({"--quick", "--isl=100", "--concurrency=3", "--layers=5"}, false).options;
  EXPECT_EQ(mixed.isl, 100);
  EXPECT_EQ(mixed.sharegpt_isl, 100);
  EXPECT_EQ(mixed.concurrency, (std::vector<int64_t>{3}));
  EXPECT_EQ(mixed.layers, 5);
}

TEST(ServeOptions, ListsAndHelp) {
  const ServeOptions o =
      parse_serve_options({"--model=llama3-8b", "--trace=sharegpt,shared-prefix,sharegpt",
                           "--concurrency=1,2,2", "--max-batched-tokens=64"},
                          false)
          .options;
  EXPECT_EQ(o.models, (std::vector<std::string>{"llama3-8b"}));
  EXPECT_EQ(o.traces, (std::vector<TraceKind>{TraceKind::kShareGpt, TraceKind::kSharedPrefix}));
  EXPECT_EQ(o.concurrency, (std::vector<int64_t>{1, 2}));
  const ParsedServeOptions help = parse_serve_options({"--help"}, false);
  EXPECT_TRUE(help.help);
  EXPECT_NE(help.usage.find("--max-batched-tokens=N"), std::string::npos);
}

struct BadFlags {
  const char* name;
  std::vector<std::string> args;
  bool gpu;
  std::string message;  // a part of the error
};

std::ostream& operator<<(std::ostream& os, const BadFlags& c) { return os << c.name; }

class ServeUsageErrors : public ::testing::TestWithParam<BadFlags> {};

TEST_P(ServeUsageErrors, NameTheFlag) {
  const BadFlags& c = GetParam();
  try {
    parse_serve_options(c.args, c.gpu);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << "message: " << e.what();
    EXPECT_NE(e.usage().find("usage: tripath serve"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Flags, ServeUsageErrors,
    ::testing::Values(
        BadFlags{"unknown_flag", {"--no-such-flag=1"}, false, "unknown flag '--no-such-flag'"},
        BadFlags{"concurrency_zero",
                 {"--concurrency=0"},
                 false,
                 "for --concurrency: expected comma-separated"},
        BadFlags{"concurrency_not_a_number",
                 {"--concurrency=8,x"},
                 false,
                 "invalid value 'x' for --concurrency"},
        BadFlags{"budget_below_concurrency",
                 {"--concurrency=64", "--max-batched-tokens=32"},
                 false,
                 "is below --concurrency=64"},
        BadFlags{
            "block_size_not_power_of_two", {"--block-size=24"}, false, "expected a power of two"},
        BadFlags{"block_size_too_large",
                 {"--block-size=512"},
                 false,
                 "for --block-size: expected an integer in [1, 256]"},
        BadFlags{"unknown_trace",
                 {"--trace=poisson"},
                 false,
                 "expected one of uniform, sharegpt, shared-prefix"},
        BadFlags{"unknown_model", {"--model=gpt-5"}, false, "invalid value 'gpt-5' for --model"},
        BadFlags{"unknown_layout",
                 {"--layout=xyz"},
                 false,
                 "invalid value 'xyz' for --layout: expected one of nhd, hnd, tiled"},
        BadFlags{"isl_zero", {"--isl=0"}, false, "for --isl: expected an integer"},
        BadFlags{"value_missing", {"--osl"}, false, "flag --osl needs a value"},
        BadFlags{"linear_without_gpu", {"--linear"}, false, "--linear is unavailable here"},
        BadFlags{"prefix_len_without_shared_prefix",
                 {"--prefix-len=10"},
                 false,
                 "apply to --trace=shared-prefix only"},
        BadFlags{"prefix_len_not_shorter",
                 {"--trace=shared-prefix", "--isl=100", "--prefix-len=100"},
                 false,
                 "must be shorter than the input"},
        BadFlags{"flag_twice", {"--requests=8", "--requests=9"}, false, "given twice"},
        BadFlags{"positional_argument", {"quick"}, false, "unexpected argument 'quick'"}),
    [](const ::testing::TestParamInfo<BadFlags>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tripath::cli
