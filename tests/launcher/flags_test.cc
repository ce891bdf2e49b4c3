// launcher/flags.h: values, switches, repeats, the errors of a bad command line, and an output
// file's folder checked before the work.
#include "launcher/flags.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace moe {
namespace {

// Parses `args` (argv[0] added) with the flags of a small command.
Status parse(FlagParser* flags, std::vector<std::string> args) {
  flags->value("config", "the config");
  flags->value("run-dir", "the run directory");
  flags->value("set", "an override", /*repeatable=*/true);
  flags->switch_flag("fresh", "start anew");
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flags->parse(static_cast<int>(argv.size()), argv.data());
}

TEST(FlagParser, ValuesSwitchesAndRepeats) {
  FlagParser flags("usage: prog\n");
  ASSERT_TRUE(
      parse(&flags, {"--config", "c.pbtxt", "--set=a=1", "--set", "b=2", "--fresh", "x"}).ok());
  EXPECT_EQ(flags.get("config"), "c.pbtxt");
  EXPECT_EQ(flags.get_all("set"), std::vector<std::string>({"a=1", "b=2"}));
  EXPECT_TRUE(flags.has("fresh"));
  EXPECT_EQ(flags.positional(), std::vector<std::string>({"x"}));
}

TEST(FlagParser, UnknownFlagSuggestsTheClosest) {
  FlagParser flags("usage: prog\n");
  const Status s = parse(&flags, {"--run-dirr", "r"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown flag --run-dirr"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("did you mean --run-dir?"), std::string::npos) << s.message();
  // With a value given inline, and a switch misspelt.
  FlagParser inline_value("usage: prog\n");
  const Status t = parse(&inline_value, {"--confg=c.pbtxt"});
  EXPECT_NE(t.message().find("did you mean --config?"), std::string::npos) << t.message();
  FlagParser misspelt_switch("usage: prog\n");
  const Status u = parse(&misspelt_switch, {"--frseh"});
  EXPECT_NE(u.message().find("did you mean --fresh?"), std::string::npos) << u.message();
  // Nothing close: no suggestion.
  FlagParser far("usage: prog\n");
  const Status v = parse(&far, {"--learning-rate", "1"});
  EXPECT_EQ(v.message().find("did you mean"), std::string::npos) << v.message();
  EXPECT_NE(v.message().find("see --help"), std::string::npos) << v.message();
}

TEST(FlagParser, MissingValueAndRepeatedFlag) {
  FlagParser missing("usage: prog\n");
  EXPECT_NE(parse(&missing, {"--config"}).message().find("--config needs a value"),
            std::string::npos);
  FlagParser twice("usage: prog\n");
  EXPECT_NE(parse(&twice, {"--config", "a", "--config", "b"}).message().find("more than once"),
            std::string::npos);
}

TEST(FlagParser, AnOutputFileIsCheckedBeforeTheWork) {
  const std::string dir = ::testing::TempDir() + "flags_test_output";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto check = [](const std::string& path) {
    FlagParser flags("usage: prog\n");
    flags.value("out", "a file written at the end");
    std::vector<std::string> args = {"prog"};
    if (path != "-") args.insert(args.end(), {"--out", path});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    EXPECT_TRUE(flags.parse(static_cast<int>(argv.size()), argv.data()).ok());
    return flags.check_output_file("out");
  };
  EXPECT_TRUE(check("-").ok());  // not given
  EXPECT_TRUE(check(dir + "/r.safetensors").ok());
  const Status missing = check(dir + "/missing/r.safetensors");
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("--out " + dir + "/missing/r.safetensors: the folder " + dir +
                                   "/missing does not exist: create it first"),
            std::string::npos)
      << missing.message();
  const Status folder = check(dir);
  EXPECT_NE(folder.message().find("is a folder"), std::string::npos) << folder.message();
  { std::ofstream(dir + "/file") << "x"; }
  const Status file = check(dir + "/file/r.safetensors");
  EXPECT_NE(file.message().find(dir + "/file is not a folder"), std::string::npos)
      << file.message();
  EXPECT_NE(check("").message().find("--out needs a file path"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moe
