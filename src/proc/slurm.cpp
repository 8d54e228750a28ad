#include "proc/slurm.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.age_secs > b.age_secs; });
    return jobs;
}

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
        write_file_atomically(m_options.spool / job.call / fmt::format("attempt-{}", job.attempt) / "abandoned",
                   fmt::format("its orchestrator {} is gone; cancelled by {}\n", job.owner, m_owner));
        log::warn("slurm: job {} of a campaign run that is gone ({}) cancelled; its result will not be read",
                  job.job_id, job.owner);
    }
}

Result SlurmExecutor::run(const Command& command) {
    const std::string call = fmt::format("{}-{}", m_owner, m_next_call.fetch_add(1));
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
        std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name", "npuopt-call", "--time", m_options.time_limit,
                                         "--output", (dir / "slurm.out").string(), "--chdir", dir.string()};
        if (!m_options.partition.empty()) argv.insert(argv.end(), {"--partition", m_options.partition});
        if (!m_options.account.empty()) argv.insert(argv.end(), {"--account", m_options.account});
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
        std::string job_id = submitted.stdout_text.substr(0, submitted.stdout_text.find_first_of(";\n"));
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
                    for (int look = 0; look < 20 && !fs::exists(dir / "result.json"); ++look) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(100));
                    }
                    if (fs::exists(dir / "result.json")) continue;
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
