#pragma once
// Toolchain calls as Slurm batch jobs (campaign.yaml `executor: slurm`). Two ways:
//
// One job per call (array_size 0):
//   spool/<call>/attempt-N/call.json ─► sbatch job.sh ─► on a node: npuopt exec-call call.json
//   result.json ◄─ (written atomically by the job) ◄─ the same proc::run, sandbox and limits
//
// A pool of workers (array_size N > 0): one job array of N tasks, each `npuopt exec-worker POOL`,
// takes the calls from a queue directory, so a call pays a file's latency, not a job's:
//   spool/pool-<owner>/queue/<call>.json ─► a worker claims it (rename into claimed/, atomic)
//   ─► runs it as exec-call does ─► results/<call>.json; a worker idle for worker_idle_secs ends,
//   and an array with no task left is submitted again when a call waits.
//
// The orchestrator polls for the result and asks `scontrol show job` how the job (or the task
// holding a claimed call) stands. A call whose job or task ends without a result (failed,
// cancelled, preempted, node failure, timeout) is submitted again as the next attempt, up to
// `retries` times, and recorded. Exactly one result is read per call, so a retry never counts
// twice. Jobs in flight are listed by jobs_in_flight (npuopt status); a new executor on the same
// spool cancels those a dead orchestrator left behind (their results were never read, and are not).

#include <atomic>
#include <filesystem>
#include <memory>
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
    int array_size = 0;                 ///< > 0: a pool of this many workers (one job array) takes the calls
    double worker_idle_secs = 120.0;    ///< a pool worker with no call for this long ends
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
    /// A pool's workers are told to stop and its array is cancelled.
    ~SlurmExecutor() override;
    SlurmExecutor(const SlurmExecutor&) = delete;
    SlurmExecutor& operator=(const SlurmExecutor&) = delete;
    Result run(const Command& command) override;
    const SlurmOptions& options() const { return m_options; }
    /// Calls this executor found lost and submitted again, since construction.
    int retried() const { return m_retried.load(); }
    /// sbatch submissions so far (jobs, or job arrays of a pool).
    int submitted() const { return m_submitted.load(); }

private:
    struct Pool;
    Result run_as_job(const Command& command, const std::string& call);
    Result run_in_pool(const Command& command, const std::string& call);
    /// A job array of the pool submitted unless one has a task pending or running; its id.
    std::string ensure_workers();

    SlurmOptions m_options;
    std::string m_owner;
    std::atomic<long> m_next_call{0};
    std::atomic<int> m_retried{0};
    std::atomic<int> m_submitted{0};
    std::unique_ptr<Pool> m_pool;
};

/// `npuopt exec-worker POOL`: a pool worker (one task of the pool's job array). Claims calls from
/// POOL/queue, runs each like exec-call into POOL/results, until POOL/closed appears, it was idle
/// for `idle_secs`, or SIGTERM (then the call it holds is left claimed, without a result).
void run_pool_worker(const std::filesystem::path& pool, double idle_secs);

/// The jobs of `spool` submitted and not finished: no result written, not lost, not abandoned.
std::vector<JobInFlight> jobs_in_flight(const std::filesystem::path& spool);

/// "PENDING", "RUNNING", "COMPLETED", "CANCELLED", …; "" when Slurm no longer knows the job.
std::string slurm_job_state(const std::string& job_id);

}  // namespace npuopt::proc
