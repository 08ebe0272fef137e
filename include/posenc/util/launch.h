// Where this process stands in a multi-process run: its rank, the number of
// ranks and the rendezvous address, read from the environment that the
// launchers set. torchrun (and `posenc train --nproc`) set RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR and MASTER_PORT; `srun` sets SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_LOCALID and the step's node list, whose first
// host is the rendezvous. No torch here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace posenc {

struct Launch {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  ///< where rank 0 serves the rendezvous store
  int master_port = 0;
  std::string source;  ///< "torchrun variables" / "srun" / "" (one process)

  bool distributed() const { return world_size > 1; }
};

/// Reads the launch environment through `getenv` (std::getenv in production,
/// a map in the tests). RANK/WORLD_SIZE win over Slurm's variables; Slurm's
/// count only inside an srun step (SLURM_STEP_ID set), so that the batch
/// script of `sbatch -n 2` is not mistaken for rank 0 of 2. Without MASTER_PORT,
/// an srun step takes a port from its job and step ids (29500 + (job % 2000) * 16
/// + step % 16). Throws ConfigError naming the variable for anything
/// inconsistent (WORLD_SIZE without MASTER_ADDR, RANK >= WORLD_SIZE, ...).
Launch read_launch(const std::function<const char*(const char*)>& getenv);
Launch read_launch_from_environment();

/// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
/// Throws ConfigError on a list it cannot read.
std::string first_slurm_host(const std::string& nodelist);

/// The rendezvous port of an srun step without MASTER_PORT, the same on every
/// rank of the step: in [20000, 32768), below the kernel's ephemeral ports;
/// steps 0-7 of jobs whose ids are less than 1,291 apart never share a port;
/// the same step of two jobs does only when their ids are a multiple of 12,768
/// apart.
int slurm_step_port(int64_t job_id, int64_t step_id);

/// The variables that place a child process as `rank` of `world_size` local
/// ranks whose rendezvous is 127.0.0.1:port (what `posenc train --nproc` sets).
std::vector<std::string> local_rank_environment(int rank, int world_size, int port);

/// A TCP port on 127.0.0.1 that is free now (the kernel's choice).
int free_local_port();

}  // namespace posenc
