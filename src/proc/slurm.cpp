#include "proc/slurm.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"

namespace npuopt::proc {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string host_name() {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
    return name;
}

/// A Slurm client command (sbatch, scontrol, scancel) run here, outside the sandbox, with the
/// variables that locate the cluster.
Result slurm_command(std::vector<std::string> argv, double timeout_secs = 60.0) {
    Command command;
    command.argv = std::move(argv);
    for (const char* name : {"SLURM_CONF", "PATH", "HOME", "USER", "LOGNAME"}) {
        if (const char* value = std::getenv(name)) command.env[name] = value;
    }
    command.sandbox.enabled = false;
    command.limits.timeout_secs = timeout_secs;
    command.limits.use_cgroups = false;
    return proc::run(command);
}

bool pending_state(const std::string& state) {
    return state == "PENDING" || state == "CONFIGURING" || state == "REQUEUED" || state == "REQUEUE_HOLD" ||
           state == "REQUEUE_FED" || state == "RESV_DEL_HOLD" || state == "SUSPENDED";
}

bool running_state(const std::string& state) {
    return state == "RUNNING" || state == "COMPLETING" || state == "STAGE_OUT" || state == "SIGNALING" ||
           state == "RESIZING";
}

fs::path default_worker() {
    std::error_code error;
    const fs::path self = fs::read_symlink("/proc/self/exe", error);
    if (!error) {
        const fs::path beside = self.parent_path() / "npuopt";
        if (fs::is_regular_file(beside, error)) return beside;
    }
    return "npuopt";
}

/// 'text' quoted for sh.
std::string shell_quote(const std::string& text) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

bool owner_alive(const std::string& owner) {
    const auto at = owner.find('@');
    if (at == std::string::npos) return false;
    if (owner.substr(at + 1) != host_name()) return true;  // another machine's: not ours to judge
    const pid_t pid = static_cast<pid_t>(std::stol(owner.substr(0, at)));
    return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

/// Whether `file` exists within 2 s: a job that just ended gives a shared file system a moment
/// to show the result it wrote.
bool shows_up(const fs::path& file) {
    for (int look = 0; look < 20 && !fs::exists(file); ++look) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return fs::exists(file);
}

/// Whether any task of job (array) `job_id` is pending or running.
bool job_has_live_task(const std::string& job_id) {
    const Result shown = slurm_command({"scontrol", "show", "job", "-o", job_id}, 30.0);
    if (!shown.ok()) return false;
    const std::regex state(R"(JobState=([A-Z_]+))");
    for (auto it = std::sregex_iterator(shown.stdout_text.begin(), shown.stdout_text.end(), state);
         it != std::sregex_iterator(); ++it) {
        const std::string value = (*it)[1].str();
        if (pending_state(value) || running_state(value)) return true;
    }
    return false;
}

/// The sbatch options every submission shares.
std::vector<std::string> sbatch_argv(const SlurmOptions& options, const std::string& name, const fs::path& output,
                                     const fs::path& dir) {
    std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name", name, "--time", options.time_limit,
                                     "--output", output.string(), "--chdir", dir.string()};
    if (!options.partition.empty()) argv.insert(argv.end(), {"--partition", options.partition});
    if (!options.account.empty()) argv.insert(argv.end(), {"--account", options.account});
    return argv;
}

std::string job_id_of(const Result& submitted) {
    return submitted.stdout_text.substr(0, submitted.stdout_text.find_first_of(";\n"));
}

/// The claimed file of call `name` in `pool` ("<task>~<name>.json"), if a worker holds it.
std::optional<fs::path> claimed_file(const fs::path& pool, const std::string& name) {
    std::error_code error;
    const std::string suffix = "~" + name + ".json";
    for (const auto& entry : fs::directory_iterator(pool / "claimed", error)) {
        if (entry.path().filename().string().ends_with(suffix)) return entry.path();
    }
    return std::nullopt;
}

}  // namespace

std::string slurm_job_state(const std::string& job_id) {
    const Result shown = slurm_command({"scontrol", "show", "job", "-o", job_id}, 30.0);
    if (!shown.ok()) return "";
    std::smatch match;
    if (std::regex_search(shown.stdout_text, match, std::regex(R"(JobState=([A-Z_]+))"))) return match[1].str();
    return "";
}

std::vector<JobInFlight> jobs_in_flight(const fs::path& spool) {
    std::vector<JobInFlight> jobs;
    std::error_code error;
    if (!fs::is_directory(spool, error)) return jobs;
    for (const auto& call : fs::directory_iterator(spool, error)) {
        if (!call.is_directory()) continue;
        for (const auto& attempt : fs::directory_iterator(call.path(), error)) {
            const fs::path dir = attempt.path();
            const std::string name = dir.filename().string();
            if (!attempt.is_directory() || name.rfind("attempt-", 0) != 0) continue;
            if (!fs::exists(dir / "job_id") || fs::exists(dir / "result.json") || fs::exists(dir / "read") ||
                fs::exists(dir / "lost") || fs::exists(dir / "abandoned")) {
                continue;
            }
            JobInFlight job;
            job.call = call.path().filename().string();
            job.attempt = std::atoi(name.substr(8).c_str());
            job.job_id = read_file_text(dir / "job_id");
            job.owner = read_file_text(dir / "owner");
            const auto written = fs::last_write_time(dir / "job_id", error);
            if (!error) {
                job.age_secs = std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
            }
            jobs.push_back(job);
        }
    }
    // A pool of workers: its job array, until its executor closed it.
    for (const auto& pool : fs::directory_iterator(spool, error)) {
        const fs::path dir = pool.path();
        if (!pool.is_directory() || dir.filename().string().rfind("pool-", 0) != 0) continue;
        if (!fs::exists(dir / "array_job_id") || fs::exists(dir / "closed")) continue;
        JobInFlight job;
        job.call = dir.filename().string();
        job.job_id = read_file_text(dir / "array_job_id");
        job.owner = read_file_text(dir / "owner");
        const auto written = fs::last_write_time(dir / "array_job_id", error);
        if (!error) job.age_secs = std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
        jobs.push_back(job);
    }
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.age_secs > b.age_secs; });
    return jobs;
}

/// The pool of workers: its directory and its current job array.
struct SlurmExecutor::Pool {
    fs::path dir;
    std::mutex mutex;
    std::string array_job;           ///< the array's job id ("" before the first submission)
    Clock::time_point checked{};     ///< when the array was last asked whether a task lives
    bool alive = false;
};

SlurmExecutor::SlurmExecutor(SlurmOptions options) : m_options(std::move(options)) {
    m_owner = fmt::format("{}@{}", ::getpid(), host_name());
    if (m_options.worker.empty()) m_options.worker = default_worker();
    std::error_code error;
    fs::create_directories(m_options.spool, error);
    if (error) {
        throw Error(ErrorKind::io,
                    fmt::format("slurm: cannot create the spool directory {}: {}", m_options.spool.string(), error.message()));
    }
    // Jobs a dead orchestrator left: cancelled, never read (the step they served is evaluated again).
    for (const auto& job : jobs_in_flight(m_options.spool)) {
        if (owner_alive(job.owner)) continue;
        slurm_command({"scancel", job.job_id}, 30.0);
        const bool pool = job.call.rfind("pool-", 0) == 0;
        write_file_atomically(pool ? m_options.spool / job.call / "closed"
                                   : m_options.spool / job.call / fmt::format("attempt-{}", job.attempt) / "abandoned",
                   fmt::format("its orchestrator {} is gone; cancelled by {}\n", job.owner, m_owner));
        log::warn("slurm: job {} of a campaign run that is gone ({}) cancelled; its result will not be read",
                  job.job_id, job.owner);
    }
    if (m_options.array_size > 0) {
        m_pool = std::make_unique<Pool>();
        m_pool->dir = m_options.spool / ("pool-" + m_owner);
        for (const char* sub : {"queue", "claimed", "results", "read", "lost"}) {
            fs::create_directories(m_pool->dir / sub, error);
        }
        if (error) {
            throw Error(ErrorKind::io, fmt::format("slurm: cannot create the pool directory {}: {}",
                                                   m_pool->dir.string(), error.message()));
        }
        write_file_atomically(m_pool->dir / "owner", m_owner);
        write_file_atomically(m_pool->dir / "worker.sh",
                              fmt::format("#!/bin/sh\nexec {} exec-worker {} --idle-secs {}\n",
                                          shell_quote(m_options.worker.string()), shell_quote(m_pool->dir.string()),
                                          m_options.worker_idle_secs));
    }
}

SlurmExecutor::~SlurmExecutor() {
    if (!m_pool) return;
    try {
        write_file_atomically(m_pool->dir / "closed", fmt::format("closed by {}\n", m_owner));
        std::lock_guard lock(m_pool->mutex);
        if (!m_pool->array_job.empty()) slurm_command({"scancel", m_pool->array_job}, 30.0);
    } catch (...) {  // a destructor: the workers end by themselves when idle
    }
}

std::string SlurmExecutor::ensure_workers() {
    std::lock_guard lock(m_pool->mutex);
    const auto now = Clock::now();
    if (!m_pool->array_job.empty()) {
        if (m_pool->alive && now - m_pool->checked < std::chrono::seconds(1)) return m_pool->array_job;
        m_pool->alive = job_has_live_task(m_pool->array_job);
        m_pool->checked = now;
        if (m_pool->alive) return m_pool->array_job;
    }
    std::vector<std::string> argv = sbatch_argv(m_options, "npuopt-pool", m_pool->dir / "worker-%A_%a.out", m_pool->dir);
    argv.insert(argv.end(), {"--array", fmt::format("0-{}", m_options.array_size - 1)});
    argv.push_back((m_pool->dir / "worker.sh").string());
    const Result submitted = slurm_command(argv);
    if (!submitted.ok()) {
        log::warn("slurm: sbatch of the worker pool failed: {}", submitted.stderr_text.substr(0, 300));
        return "";
    }
    m_submitted.fetch_add(1);
    m_pool->array_job = job_id_of(submitted);
    m_pool->alive = true;
    m_pool->checked = now;
    write_file_atomically(m_pool->dir / "array_job_id", m_pool->array_job);
    return m_pool->array_job;
}

Result SlurmExecutor::run(const Command& command) {
    const std::string call = fmt::format("{}-{}", m_owner, m_next_call.fetch_add(1));
    return m_pool ? run_in_pool(command, call) : run_as_job(command, call);
}

Result SlurmExecutor::run_in_pool(const Command& command, const std::string& call) {
    const fs::path& pool = m_pool->dir;
    std::vector<std::string> lost;
    const int attempts = 1 + std::max(0, m_options.retries);
    for (int attempt = 1; attempt <= attempts; ++attempt) {
        const std::string name = fmt::format("{}.a{}", call, attempt);
        const fs::path queued = pool / "queue" / (name + ".json");
        const fs::path result_file = pool / "results" / (name + ".json");
        write_file_atomically(queued, to_json(command).dump());
        if (ensure_workers().empty()) {
            std::error_code ignored;
            fs::remove(queued, ignored);
            lost.push_back(fmt::format("attempt {}: sbatch of the worker pool failed", attempt));
            std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
            continue;
        }
        const auto queued_at = Clock::now();
        auto next_check = queued_at + std::chrono::milliseconds(500);
        double wait = std::min(m_options.poll_secs, 0.02);
        std::string ended;  // how the task holding the call ended without a result
        while (true) {
            if (fs::exists(result_file)) {
                Result result = result_from_json(nlohmann::json::parse(read_file_text(result_file)));
                std::error_code ignored;
                fs::rename(result_file, pool / "read" / (name + ".json"), ignored);  // read once
                return result;
            }
            if (interrupted()) {
                std::error_code ignored;
                fs::remove(queued, ignored);
                throw_if_interrupted();
            }
            const auto now = Clock::now();
            if (now >= next_check) {
                next_check = now + std::chrono::seconds(1);
                if (const auto claimed = claimed_file(pool, name)) {
                    const std::string filename = claimed->filename().string();
                    const std::string task = filename.substr(0, filename.find('~'));
                    const std::string state = slurm_job_state(task);
                    if (!pending_state(state) && !running_state(state)) {
                        if (shows_up(result_file)) continue;
                        ended = fmt::format("task {} ended {}", task, state.empty() ? std::string("gone") : state);
                        std::error_code ignored;
                        fs::rename(*claimed, pool / "lost" / filename, ignored);  // never read, if it ever appears
                        break;
                    }
                } else if (fs::exists(queued)) {
                    if (std::chrono::duration<double>(now - queued_at).count() > m_options.queue_timeout_secs) {
                        std::error_code ignored;
                        fs::remove(queued, ignored);
                        Result failed;
                        failed.error = fmt::format("slurm: no pool worker took the call for more than {:.0f} s "
                                                   "(partition {})",
                                                   m_options.queue_timeout_secs,
                                                   m_options.partition.empty() ? "default" : m_options.partition);
                        return failed;
                    }
                    ensure_workers();  // the array ended (idle, time limit, cancelled): a new one
                }
            }
            std::this_thread::sleep_for(std::chrono::duration<double>(wait));
            wait = std::min(0.2, wait * 2.0);
        }
        lost.push_back(fmt::format("attempt {}: {} without a result", attempt, ended));
        write_file_atomically(pool / "lost" / (name + ".why"), lost.back() + "\n");
        if (attempt < attempts) {
            m_retried.fetch_add(1);
            log::warn("slurm: {} without a result; the call is queued again (attempt {} of {})", ended, attempt + 1,
                      attempts);
        }
    }
    Result failed;
    failed.error = fmt::format("slurm: the call failed {} time(s): {}", lost.size(), fmt::join(lost, "; "));
    return failed;
}

void run_pool_worker(const fs::path& pool, double idle_secs) {
    const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
    const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
    const char* job = std::getenv("SLURM_JOB_ID");
    const std::string task = array_job && array_task ? fmt::format("{}_{}", array_job, array_task)
                             : job                   ? std::string(job)
                                                     : fmt::format("local-{}", ::getpid());
    if (!fs::is_directory(pool / "queue")) {
        throw Error(ErrorKind::invalid_input, fmt::format("{} is not a worker pool (no queue/)", pool.string()));
    }
    auto last_work = Clock::now();
    double wait = 0.01;
    while (!interrupted() && !fs::exists(pool / "closed")) {
        std::vector<fs::path> queued;
        std::error_code error;
        for (const auto& entry : fs::directory_iterator(pool / "queue", error)) {
            if (entry.path().extension() == ".json") queued.push_back(entry.path());
        }
        std::sort(queued.begin(), queued.end());
        bool worked = false;
        for (const auto& file : queued) {
            const fs::path claimed = pool / "claimed" / (task + "~" + file.filename().string());
            fs::rename(file, claimed, error);
            if (error) continue;  // another worker took it
            try {
                execute_call_file(claimed, pool / "results" / file.filename());
            } catch (const Error& failure) {
                if (failure.kind() == ErrorKind::interrupted) return;  // left claimed: the call is retried
                Result broken;
                broken.error = fmt::format("pool worker {}: {}", task, failure.what());
                write_file_atomically(pool / "results" / file.filename(), to_json(broken).dump());
            }
            fs::remove(claimed, error);
            worked = true;
            last_work = Clock::now();
            wait = 0.01;
            break;
        }
        if (worked) continue;
        if (std::chrono::duration<double>(Clock::now() - last_work).count() > idle_secs) return;
        std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        wait = std::min(0.1, wait * 2.0);
    }
}

Result SlurmExecutor::run_as_job(const Command& command, const std::string& call) {
    const fs::path call_dir = m_options.spool / call;
    std::vector<std::string> lost;
    const int attempts = 1 + std::max(0, m_options.retries);
    for (int attempt = 1; attempt <= attempts; ++attempt) {
        const fs::path dir = call_dir / fmt::format("attempt-{}", attempt);
        fs::create_directories(dir);
        write_file_atomically(dir / "call.json", to_json(command).dump());
        write_file_atomically(dir / "owner", m_owner);
        write_file_atomically(dir / "job.sh", fmt::format("#!/bin/sh\nexec {} exec-call {} {}\n", shell_quote(m_options.worker.string()),
                                               shell_quote((dir / "call.json").string()),
                                               shell_quote((dir / "result.json").string())));
        std::vector<std::string> argv = sbatch_argv(m_options, "npuopt-call", dir / "slurm.out", dir);
        argv.push_back((dir / "job.sh").string());
        const Result submitted = slurm_command(argv);
        if (!submitted.ok()) {
            lost.push_back(fmt::format("attempt {}: sbatch failed ({}): {}", attempt,
                                       submitted.error.value_or(fmt::format("exit {}", submitted.exit_code.value_or(-1))),
                                       submitted.stderr_text.substr(0, 300)));
            write_file_atomically(dir / "lost", lost.back() + "\n");
            std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
            continue;
        }
        m_submitted.fetch_add(1);
        std::string job_id = job_id_of(submitted);
        write_file_atomically(dir / "job_id", job_id);

        const auto start = Clock::now();
        auto next_state_check = start + std::chrono::milliseconds(500);
        Clock::time_point pending_since = start;  ///< when the job was last seen start pending
        bool pending = true;
        double wait = m_options.poll_secs;
        std::string ended;  // the state the job ended in without a result
        while (true) {
            if (fs::exists(dir / "result.json")) {
                Result result = result_from_json(nlohmann::json::parse(read_file_text(dir / "result.json")));
                write_file_atomically(dir / "read", call + "\n");  // read once: this call's one result
                return result;
            }
            if (interrupted()) {
                slurm_command({"scancel", job_id}, 30.0);
                write_file_atomically(dir / "abandoned", "interrupted: cancelled\n");
                throw_if_interrupted();
            }
            const auto now = Clock::now();
            if (now >= next_state_check) {
                const std::string state = slurm_job_state(job_id);
                next_state_check = now + std::chrono::seconds(1);
                if (pending_state(state)) {
                    if (!pending) pending_since = now;
                    pending = true;
                    if (std::chrono::duration<double>(now - pending_since).count() > m_options.queue_timeout_secs) {
                        slurm_command({"scancel", job_id}, 30.0);
                        write_file_atomically(dir / "abandoned", "pending too long: cancelled\n");
                        Result failed;
                        failed.error = fmt::format("slurm: job {} pending for more than {:.0f} s (partition {}): cancelled",
                                                   job_id, m_options.queue_timeout_secs,
                                                   m_options.partition.empty() ? "default" : m_options.partition);
                        return failed;
                    }
                } else if (running_state(state)) {
                    pending = false;
                } else {
                    // Ended (or forgotten by Slurm): give a shared file system a moment to show the result.
                    if (shows_up(dir / "result.json")) continue;
                    ended = state.empty() ? std::string("gone") : state;
                    break;
                }
            }
            std::this_thread::sleep_for(std::chrono::duration<double>(wait));
            wait = std::min(1.0, wait * 2.0);
        }
        std::string said = read_file_text(dir / "slurm.out");  // the job's own words, e.g. a worker not found
        while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
        if (said.size() > 300) said = "…" + said.substr(said.size() - 300);
        lost.push_back(fmt::format("attempt {}: job {} ended {} without a result{}", attempt, job_id, ended,
                                   said.empty() ? std::string() : fmt::format(" ({})", said)));
        write_file_atomically(dir / "lost", lost.back() + "\n");
        if (attempt < attempts) {
            m_retried.fetch_add(1);
            log::warn("slurm: job {} ended {} without a result; submitted again (attempt {} of {})", job_id, ended,
                      attempt + 1, attempts);
        }
    }
    Result failed;
    failed.error = fmt::format("slurm: the call failed {} time(s): {}", lost.size(), fmt::join(lost, "; "));
    return failed;
}

}  // namespace npuopt::proc
