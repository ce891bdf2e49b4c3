// io/child_process.h with ordinary programs: a line round trip through `cat`, the
// environment, exit statuses, a child that stops reading (no SIGPIPE for us), a program that does
// not exist, and the destructor ending a child that still runs.
#include "io/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>

namespace moe::io {
namespace {

SpawnOptions with_pipes() {
  SpawnOptions o;
  o.pipes = true;
  return o;
}

TEST(ChildProcessTest, LinesGoThroughCat) {
  auto child = ChildProcess::spawn({"cat"}, with_pipes()).value();
  ASSERT_TRUE(child->write_line("first line").ok());
  ASSERT_TRUE(child->write_line("").ok());
  ASSERT_TRUE(child->write_line(std::string(100000, 'x')).ok());
  EXPECT_EQ(child->read_line().value(), std::optional<std::string>("first line"));
  EXPECT_EQ(child->read_line().value(), std::optional<std::string>(""));
  EXPECT_EQ(child->read_line().value(), std::optional<std::string>(std::string(100000, 'x')));
  child->close_stdin();
  EXPECT_EQ(child->read_line().value(), std::nullopt);
  const int status = child->wait().value();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_wait_status(status);
  EXPECT_EQ(child->command_line(), "`cat`");
}

TEST(ChildProcessTest, SetsTheEnvironmentAndReportsTheExitCode) {
  SpawnOptions o = with_pipes();
  o.env = {"MOMOE_CHILD_TEST=replaced", "PATH=/usr/bin:/bin"};
  ::setenv("MOMOE_CHILD_TEST", "original", 1);
  auto child = ChildProcess::spawn({"sh", "-c", "echo \"$MOMOE_CHILD_TEST\"; exit 3"}, o).value();
  EXPECT_EQ(child->read_line().value(), std::optional<std::string>("replaced"));
  const int status = child->wait().value();
  EXPECT_EQ(describe_wait_status(status), "exited with code 3");
  EXPECT_EQ(child->try_wait().value(), std::optional<int>(status));
}

TEST(ChildProcessTest, AChildThatStopsReadingIsAnErrorNotASignal) {
  auto child = ChildProcess::spawn({"true"}, with_pipes()).value();
  ASSERT_TRUE(child->wait().ok());
  Status s;
  for (int i = 0; i < 4 && s.ok(); ++i) s = child->write_line(std::string(1 << 16, 'y'));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("`true` no longer reads its input"), std::string::npos);
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
  EXPECT_EQ(child->read_line().value(), std::nullopt);
}

TEST(ChildProcessTest, NamesAProgramThatCannotStart) {
  const Status s = ChildProcess::spawn({"/nonexistent/momoe-nothing"}, {}).status();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("cannot start /nonexistent/momoe-nothing"), std::string::npos)
      << s.message();
}

TEST(ChildProcessTest, TheDestructorEndsARunningChild) {
  pid_t pid = -1;
  {
    auto child = ChildProcess::spawn({"sleep", "100"}, {}).value();
    pid = child->pid();
    EXPECT_EQ(child->try_wait().value(), std::nullopt);
  }
  // Ended and reaped: no such process any more.
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace moe::io
