#pragma once
// Toolchain calls as Slurm batch jobs (campaign.yaml `executor: slurm`). Each call is one job:
//
//   spool/<call>/attempt-N/call.json ─► sbatch job.sh ─► on a node: npuopt exec-call call.json
//   result.json ◄─ (written atomically by the job) ◄─ the same proc::run, sandbox and limits
//
// The orchestrator polls for result.json and asks `scontrol show job` how the job stands. A job
// that ends without a result (failed, cancelled, preempted, node failure, timeout) is submitted
// again as the next attempt, up to `retries` times, and recorded in its attempt's `lost` file.
// Exactly one result is read per call, so a retry never counts twice. Jobs in flight are listed
// by jobs_in_flight (npuopt status); a new executor on the same spool cancels those a dead
// orchestrator left behind (their results were never read, and are not).

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "proc/executor.hpp"

namespace npuopt::proc {

struct SlurmOptions {
    std::filesystem::path spool;        ///< the campaign's spool directory (on a file system the nodes share)
    std::filesystem::path worker;       ///< the npuopt binary the job runs (`exec-call`); empty: beside this one
    std::string partition;              ///< sbatch --partition ("" : the cluster's default)
    std::string account;                ///< sbatch --account ("" : none)
    std::string time_limit = "10";      ///< sbatch --time (minutes, or Slurm's [D-]HH:MM:SS)
    int retries = 2;                    ///< submissions after the first when a job ends without a result
    double queue_timeout_secs = 3600.0; ///< a job pending longer is cancelled and the call fails
    double poll_secs = 0.05;            ///< first wait between looks (doubles up to 1 s)
};

/// A job submitted and not yet finished with a result: its call, attempt, Slurm id and age.
struct JobInFlight {
    std::string call;
    int attempt = 0;
    std::string job_id;
    double age_secs = 0.0;
    std::string owner;                  ///< "pid@host" of the orchestrator that submitted it
};

class SlurmExecutor final : public Executor {
public:
    /// Cancels the jobs in flight that an orchestrator no longer running left in `spool`.
    explicit SlurmExecutor(SlurmOptions options);
    Result run(const Command& command) override;
    const SlurmOptions& options() const { return m_options; }
    /// Jobs this executor (or a dead one) found lost and submitted again, since construction.
    int retried() const { return m_retried.load(); }

private:
    SlurmOptions m_options;
    std::string m_owner;
    std::atomic<long> m_next_call{0};
    std::atomic<int> m_retried{0};
};

/// The jobs of `spool` submitted and not finished: no result written, not lost, not abandoned.
std::vector<JobInFlight> jobs_in_flight(const std::filesystem::path& spool);

/// "PENDING", "RUNNING", "COMPLETED", "CANCELLED", …; "" when Slurm no longer knows the job.
std::string slurm_job_state(const std::string& job_id);

}  // namespace npuopt::proc
