// The multi-rank watchdog (issue 25 item 5, --dist-timeout-s) through real `mpirun -np 2
// strata serve` jobs: a rank that hangs (SIGSTOP) or dies (SIGKILL, under Open MPI's
// orte_enable_recovery so mpirun does not end the job itself) makes the server answer the
// requests in flight with errors within the timeout, and the job then ends by itself --
// nothing hangs.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "mpi_test_util.h"

namespace strata {
namespace {

using namespace mpitest;  // NOLINT: test helpers
using Clock = std::chrono::steady_clock;

// The pid of rank `rank` among mpirun's children (the launched strata processes).
pid_t rank_pid(pid_t mpirun, int rank) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string line;
    std::getline(st, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    std::istringstream(line.substr(close + 2)) >> state >> ppid;
    if (ppid != mpirun) continue;
    std::ifstream env(e.path() / "environ");
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (all.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

Answer ask_long(int port, int max_tokens) {
  const nlohmann::json j = {{"prompt", testing::random_prompt(24, 5, 512)},
                            {"max_tokens", max_tokens}, {"temperature", 0},
                            {"ignore_eos", true}};
  const testing::HttpReply h = testing::http_post(port, "/v1/completions", j.dump());
  return Answer{h.status, "", "", h.body};
}

// Starts the job, checks it answers, applies `sig` to rank 1 while a long request is in
// flight; that request (or, if it finished first, the next one) gets an error within the
// timeout, and the job ends by itself.
// `layout`: the parallel layout's flags (EP by default; the pipeline's stage boundaries are
// waited on the same way).
void rank_failure(int sig, const std::vector<std::string>& mpirun_extra,
                  const std::vector<std::string>& layout = {"--enable-expert-parallel"}) {
  const double timeout_s = 5;
  std::vector<std::string> launcher = {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root"};
  launcher.insert(launcher.end(), mpirun_extra.begin(), mpirun_extra.end());
  launcher.insert(launcher.end(), {"-np", "2"});
  std::vector<std::string> args = {"serve", "--model", src_dir() + "/models/deepseek-v41-tiny",
                                   "--port", "0", "--threads", "1", "--disable-log-requests",
                                   "--dist-timeout-s", std::to_string(timeout_s)};
  args.insert(args.end(), layout.begin(), layout.end());
  const bool pp = layout.front() == "--pipeline-parallel-size";
  auto job = testing::StrataProcess::start_with(launcher, args,
                                                "watchdog-" + std::to_string(sig) + (pp ? "-pp" : ""));
  ASSERT_TRUE(job);
  ASSERT_EQ(ask_long(job->port(), 4).status, 200);
  const pid_t r1 = rank_pid(job->pid(), 1);
  ASSERT_GT(r1, 0) << "rank 1 of mpirun " << job->pid() << " not found";
  auto in_flight = std::async(std::launch::async, [&] { return ask_long(job->port(), 400); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(r1, sig), 0);
  Answer a = in_flight.get();
  if (a.status == 200) a = ask_long(job->port(), 8);  // it finished before the signal landed
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(a.status, 200) << a.body;
  if (a.status != 0) {  // 0: the connection closed without an answer
    EXPECT_NE(a.body.find("multi-rank engine failed"), std::string::npos) << a.body;
  }
  EXPECT_LT(waited, timeout_s + 10) << "the error came after " << waited << " s";
  // The job aborts itself (rank 0's MPI_Abort) instead of waiting for the lost rank.
  EXPECT_TRUE(job->wait_exit(30)) << "mpirun still running; log " << job->log();
  if (sig == SIGSTOP) ::kill(r1, SIGKILL);
  record("deepseek-v41-tiny", 2, pp ? 1 : 2,
         fmt::format("serve, {}; watchdog: rank 1 {} mid-request, --dist-timeout-s 5", pp ? "PP" : "EP",
                     sig == SIGSTOP ? "stopped (SIGSTOP)" : "killed (SIGKILL, orte_enable_recovery)"),
         ::testing::Test::HasFailure() ? "FAIL"
                                       : "pass: request answered with an error, job ended",
         1, pp ? 2 : 1);
}

TEST(MpiWatchdog, HungRankFailsTheStepWithinTheTimeout) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  rank_failure(SIGSTOP, {});
}

TEST(MpiWatchdog, KilledRankFailsTheStepWithinTheTimeout) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  rank_failure(SIGKILL, {"--mca", "orte_enable_recovery", "1"});
}

// Stage 1 of a pipeline stops: stage 0 waits for the last stage's result within the timeout.
TEST(MpiWatchdog, HungPipelineStageFailsTheStepWithinTheTimeout) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  rank_failure(SIGSTOP, {}, {"--pipeline-parallel-size", "2"});
}

}  // namespace
}  // namespace strata
