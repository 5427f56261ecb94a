// read_launch_info against a fake environment: every launcher, the precedence between them,
// and every malformed value.
#include "src/launch_env.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace weft {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

EnvLookup fake(const Env& env) {
  return [env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

absl::StatusOr<LaunchInfo> read(const Env& env) { return read_launch_info(fake(env)); }

// Expects InvalidArgument whose message contains every one of `parts`.
void expect_invalid(const Env& env, std::initializer_list<std::string> parts) {
  auto r = read(env);
  ASSERT_FALSE(r.ok()) << "accepted; rank " << r->rank << " size " << r->size;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  for (const auto& p : parts) EXPECT_THAT(std::string(r.status().message()), HasSubstr(p));
}

TEST(LaunchEnv, OpenMpi) {
  auto r = read({{"OMPI_COMM_WORLD_RANK", "5"},
                 {"OMPI_COMM_WORLD_SIZE", "8"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                 {"WEFT_COORDINATOR", "node0:29500"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->size, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_size, 4);
  EXPECT_EQ(r->launcher, "mpirun");
  EXPECT_EQ(r->coordinator, "node0:29500");
}

// Where tcp listens (listen_ifname) rests on this: loopback only when the launcher started
// exactly the communicator's ranks, all on this host.
TEST(LaunchEnv, EveryRankHereOnlyWhenTheLauncherStartedThemAllHere) {
  const Env four_here = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  EXPECT_TRUE(launcher_puts_every_rank_here(4, fake(four_here)));
  EXPECT_TRUE(launcher_puts_every_rank_here(0, fake(four_here)));  // size not known yet
  EXPECT_FALSE(launcher_puts_every_rank_here(8, fake(four_here)));  // more ranks than launched
  Env two_hosts = four_here;
  two_hosts["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  EXPECT_FALSE(launcher_puts_every_rank_here(4, fake(two_hosts)));
  // One process per host (mpirun -np 1 on each node), a UniqueId across them.
  const Env one = {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}};
  EXPECT_FALSE(launcher_puts_every_rank_here(4, fake(one)));
  EXPECT_FALSE(launcher_puts_every_rank_here(0, fake(one)));
  EXPECT_FALSE(launcher_puts_every_rank_here(2, fake({})));  // no launcher
  EXPECT_EQ(listen_ifname("", true), "lo");
  EXPECT_EQ(listen_ifname("", false), "");
  EXPECT_EQ(listen_ifname("eth0,eth1", true), "eth0,eth1");
}

TEST(LaunchEnv, OpenMpiWithoutLocalVariables) {
  auto r = read({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->local_size, -1);
  EXPECT_EQ(r->coordinator, "");
}

TEST(LaunchEnv, SlurmTasksPerNodeForms) {
  const Env base = {{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "11"}, {"SLURM_LOCALID", "2"}};
  struct Case {
    Env extra;
    int local_size;
  };
  const Case cases[] = {
      {{}, -1},                                                          // not said
      {{{"SLURM_NTASKS_PER_NODE", "4"}}, 4},                             // plain count
      {{{"SLURM_TASKS_PER_NODE", "4(x2)"}}, 4},                          // uniform, repeated
      {{{"SLURM_TASKS_PER_NODE", "4(x2),3"}}, -1},                       // uneven, no node id
      {{{"SLURM_TASKS_PER_NODE", "4(x2),3"}, {"SLURM_NODEID", "1"}}, 4},  // node 1 of 0-1
      {{{"SLURM_TASKS_PER_NODE", "4(x2),3"}, {"SLURM_NODEID", "2"}}, 3},  // the last node
      {{{"SLURM_TASKS_PER_NODE", "2,5(x2)"}, {"SLURM_NODEID", "2"}}, 5},
      // The step's layout wins over the allocation's.
      {{{"SLURM_TASKS_PER_NODE", "8(x2)"}, {"SLURM_STEP_TASKS_PER_NODE", "3(x4)"}}, 3},
  };
  for (const auto& c : cases) {
    Env env = base;
    env.insert(c.extra.begin(), c.extra.end());
    auto r = read(env);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->launcher, "slurm");
    EXPECT_EQ(r->rank, 6);
    EXPECT_EQ(r->size, 11);
    EXPECT_EQ(r->local_rank, 2);
    EXPECT_EQ(r->local_size, c.local_size) << (c.extra.empty() ? "" : c.extra.begin()->second);
  }
}

TEST(LaunchEnv, MalformedSlurmTasksPerNode) {
  for (const char* bad : {"", "4(x", "4(x2", "(x2)", "4(2)", "4(x0)", "0", "4,,3", "a(x2)",
                          "4(x2)junk", "-4"}) {
    if (*bad == '\0') continue;  // empty counts as unset
    expect_invalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_TASKS_PER_NODE", bad}},
                   {"SLURM_TASKS_PER_NODE", bad});
  }
  expect_invalid({{"SLURM_PROCID", "0"},
                  {"SLURM_NTASKS", "4"},
                  {"SLURM_TASKS_PER_NODE", "2,1"},
                  {"SLURM_NODEID", "5"}},
                 {"SLURM_NODEID=5", "SLURM_TASKS_PER_NODE=2,1"});
  // More ranks on this node than in the whole job.
  expect_invalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "8"}},
                 {"8 ranks run on this node but 4 in the whole job"});
}

TEST(LaunchEnv, WeftVariablesOverrideLaunchers) {
  auto r = read({{"WEFT_RANK", "1"},
                 {"WEFT_SIZE", "2"},
                 {"OMPI_COMM_WORLD_RANK", "5"},
                 {"OMPI_COMM_WORLD_SIZE", "8"},
                 {"SLURM_PROCID", "3"},
                 {"SLURM_NTASKS", "4"},
                 {"PMI_RANK", "0"},
                 {"PMI_SIZE", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->launcher, "weft");
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->size, 2);
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->local_size, -1);
}

TEST(LaunchEnv, OpenMpiBeatsSlurmAndEmptyCountsAsUnset) {
  // mpirun inside an sbatch script: Slurm's batch variables are inherited.
  auto r = read({{"WEFT_RANK", ""},
                 {"OMPI_COMM_WORLD_RANK", "3"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"SLURM_PROCID", "0"},
                 {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->launcher, "mpirun");
  EXPECT_EQ(r->rank, 3);
}

TEST(LaunchEnv, WeftLocalRankOverrides) {
  auto r = read({{"WEFT_RANK", "3"}, {"WEFT_SIZE", "4"}, {"WEFT_LOCAL_RANK", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->local_rank, 1);
  r = read({{"OMPI_COMM_WORLD_RANK", "3"},
            {"OMPI_COMM_WORLD_SIZE", "4"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
            {"WEFT_LOCAL_RANK", "0"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->local_size, 2);
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                  {"WEFT_LOCAL_RANK", "2"}},
                 {"WEFT_LOCAL_RANK", "(2)", "(2)"});
}

TEST(LaunchEnv, PmiFallback) {
  auto r = read({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->launcher, "mpirun");
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->size, 3);
  EXPECT_EQ(r->local_size, -1);
  r = read({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"},
            {"MPI_LOCALNRANKS", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->local_size, 1);
  // Slurm outranks PMI (srun --mpi=pmi2 sets both).
  r = read({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "3"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->launcher, "slurm");
  EXPECT_EQ(r->rank, 1);
}

TEST(LaunchEnv, MalformedIntegersNameTheVariable) {
  for (const char* bad : {"abc", "-1", "3x", " 3", "3 ", "+3", "0x3", "1e3", "99999999999"}) {
    expect_invalid({{"WEFT_RANK", bad}, {"WEFT_SIZE", "4"}}, {"WEFT_RANK", bad});
    expect_invalid({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", bad}},
                   {"OMPI_COMM_WORLD_SIZE", bad});
    expect_invalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", bad}},
                   {"SLURM_LOCALID", bad});
    expect_invalid({{"PMI_RANK", bad}, {"PMI_SIZE", "4"}}, {"PMI_RANK", bad});
    expect_invalid({{"WEFT_RANK", "0"}, {"WEFT_SIZE", "4"}, {"WEFT_LOCAL_RANK", bad}},
                   {"WEFT_LOCAL_RANK", bad});
  }
}

TEST(LaunchEnv, OutOfRangeValues) {
  expect_invalid({{"WEFT_RANK", "4"}, {"WEFT_SIZE", "4"}}, {"WEFT_RANK=4", "WEFT_SIZE=4"});
  expect_invalid({{"WEFT_RANK", "0"}, {"WEFT_SIZE", "0"}}, {"WEFT_SIZE=0"});
  expect_invalid({{"WEFT_RANK", "0"}, {"WEFT_SIZE", "1048577"}}, {"WEFT_SIZE=1048577"});
  auto r = read({{"WEFT_RANK", "1048575"}, {"WEFT_SIZE", "1048576"}});
  EXPECT_TRUE(r.ok()) << r.status();
  expect_invalid({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "9"}}, {"SLURM_PROCID=9", "SLURM_NTASKS=9"});
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE=0"});
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "5"}},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE=5"});
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                 {"local rank (2)", "local size (2)"});
}

TEST(LaunchEnv, HalfASourceIsAnError) {
  expect_invalid({{"WEFT_RANK", "0"}}, {"WEFT_RANK=0", "WEFT_SIZE"});
  expect_invalid({{"WEFT_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                 {"WEFT_SIZE=2", "WEFT_RANK"});
  expect_invalid({{"SLURM_NTASKS", "2"}}, {"SLURM_NTASKS=2", "SLURM_PROCID"});
}

TEST(LaunchEnv, NothingSetSaysHowToLaunch) {
  auto r = read({{"WEFT_COORDINATOR", "node0:1234"}, {"HOME", "/root"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr("mpirun"), HasSubstr("srun"), HasSubstr("WEFT_RANK"),
                    HasSubstr("WEFT_SIZE"), HasSubstr("WEFT_COORDINATOR")));
}

}  // namespace
}  // namespace weft
