// `posenc compare`: runs a comparison grid as independent `posenc train`
// processes, N at a time, then writes the summary, the figures and the report.
//
// OUT/ holds configs/<id>.json (what each child trains), runs/<id>/ (run
// directories), logs/<id>.log, summary.{json,csv,md}, inspect/ and attention/
// (JSON behind the figures), figures/*.png and report.md. Rerunning the same
// command skips finished runs, resumes killed ones from their checkpoint and
// starts the rest; a run directory made from another config is an error, never
// overwritten.
//
// On a Slurm cluster (--slurm) the same plan becomes job arrays, one task per
// run still to do, and OUT/slurm/ holds their scripts and job ids; --status
// shows where each run stands, --collect writes the summary and report from
// what is finished, and each array task runs `--run ID`.
#pragma once

#include <cstdint>
#include <string>

#include "posenc/experiments/slurm.h"

namespace posenc {

struct CompareOptions {
  std::string config;             ///< the comparison file
  std::string out;                ///< OUT; default runs/<config file stem>[-full]
  int jobs = 0;                   ///< runs side by side; 0 = number of cores
  int64_t threads = 1;            ///< intra-op threads per run
  bool full = false;              ///< apply the file's "full" block (more seeds, ...)
  bool progress = false;          ///< one updating terminal line (else log lines)
  bool figures = true;            ///< run scripts/plot_compare.py when matplotlib is there
  int64_t inspect_length = 64;    ///< positions shown in the scheme figures
  int64_t attention_length = 16;  ///< tokens of the attention-map example

  bool slurm = false;      ///< submit job arrays instead of running locally
  SlurmFlags slurm_flags;  ///< flags that win over the grid file's "slurm" block
  bool status = false;     ///< show each run's state, run nothing
  bool collect = false;    ///< summary, report and figures from what is finished; train nothing
  std::string run_id;      ///< train this one run (what an array task does)
};

/// Returns the exit status: 0 when every planned run has results, 1 otherwise
/// (--slurm: 0 once the arrays are submitted or written; --run: the run's).
int run_comparison(const CompareOptions& options);

}  // namespace posenc
