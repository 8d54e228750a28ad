// The Slurm executor (proc/slurm.hpp) against a real single-node cluster that this test starts on
// loopback (tools/slurm/local-cluster.sh: slurm-wlm and munge from Debian) and stops at the end.
// Skipped where Slurm is missing or the test is not root, unless NPUOPT_REQUIRE_SLURM is set (CI).
// One test case, so that one process owns the cluster.

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "proc/slurm.hpp"
#include "../support/temp_dir.hpp"

using namespace npuopt;
namespace fs = std::filesystem;

namespace {

const fs::path k_script = fs::path(NPUOPT_SOURCE_DIR) / "tools/slurm/local-cluster.sh";

std::string read_text(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

int shell(const std::string& command) {
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool wait_for(const fs::path& file, double secs) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
    while (std::chrono::steady_clock::now() < until) {
        if (fs::exists(file)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return fs::exists(file);
}

/// The cluster for the length of the test: started in a private directory, stopped after.
struct LocalCluster {
    fakes::TempDir dir{"npuopt-slurm"};
    bool up = false;
    std::string why;
    LocalCluster() {
        if (::geteuid() != 0) {
            why = "not root (slurmd runs jobs as their user)";
            return;
        }
        if (shell("command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null") != 0) {
            why = "slurm-wlm or munge is not installed (apt-get install slurm-wlm munge)";
            return;
        }
        up = shell(fmt::format("'{}' start '{}' >'{}/start.log' 2>&1", k_script.string(), dir.path().string(),
                               dir.path().string())) == 0;
        if (!up) why = "the cluster did not start: " + read_text(dir.path() / "start.log");
        if (up) ::setenv("SLURM_CONF", (dir.path() / "slurm.conf").c_str(), 1);
    }
    ~LocalCluster() {
        if (up) shell(fmt::format("'{}' stop '{}' >/dev/null 2>&1", k_script.string(), dir.path().string()));
    }
};

proc::Command sh(const std::string& script, const fs::path& cwd) {
    proc::Command command;
    command.argv = {"/bin/sh", "-c", script};
    command.cwd = cwd;
    command.sandbox.enabled = false;
    command.limits.use_cgroups = false;
    command.limits.timeout_secs = 120;
    return command;
}

proc::SlurmOptions options_for(const fs::path& spool, const fs::path& worker = NPUOPT_BINARY) {
    proc::SlurmOptions options;
    options.spool = spool;
    options.worker = worker;
    options.time_limit = "5";
    options.retries = 2;
    return options;
}

/// The job id of `attempt` of the only call in `spool`, once it was submitted.
std::string submitted_job(const fs::path& spool, int attempt, double secs) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
    while (std::chrono::steady_clock::now() < until) {
        if (fs::is_directory(spool)) {
            for (const auto& call : fs::directory_iterator(spool)) {
                const fs::path id = call.path() / fmt::format("attempt-{}", attempt) / "job_id";
                if (fs::exists(id)) return read_text(id);
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "";
}

/// The state job `job_id` settles in (waits up to 5 s while it is still pending or running).
std::string final_state(const std::string& job_id) {
    std::string state;
    for (int look = 0; look < 50; ++look) {
        state = proc::slurm_job_state(job_id);
        if (state != "RUNNING" && state != "PENDING" && state != "COMPLETING") break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return state;
}

}  // namespace

TEST_CASE("slurm: calls run as batch jobs or through a pool of workers, lost jobs are retried once each, orphans of a killed orchestrator are cancelled") {
    LocalCluster cluster;
    if (!cluster.up) {
        if (std::getenv("NPUOPT_REQUIRE_SLURM")) FAIL("NPUOPT_REQUIRE_SLURM is set but no cluster: " << cluster.why);
        MESSAGE("no Slurm cluster (" << cluster.why << "): the Slurm tests are skipped");
        return;
    }
    fakes::TempDir work("npuopt-slurm-work");

    // A call runs as a job: exit code, both streams, the spool's record of it.
    {
        const fs::path spool = work.path() / "spool-run";
        proc::SlurmExecutor executor(options_for(spool));
        const proc::Result result = executor.run(sh("echo out; echo err >&2; exit 3", work.path()));
        CHECK(result.started);
        REQUIRE(result.exit_code);
        CHECK(*result.exit_code == 3);
        CHECK(result.stdout_text == "out\n");
        CHECK(result.stderr_text == "err\n");
        CHECK(proc::jobs_in_flight(spool).empty());
        CHECK(executor.retried() == 0);
    }

    // A job cancelled while it runs is submitted again, and the call returns the retry's one result.
    {
        const fs::path spool = work.path() / "spool-cancel";
        const fs::path mark = work.path() / "cancel.mark";
        proc::SlurmExecutor executor(options_for(spool));
        std::jthread canceller([&] {
            const std::string job = submitted_job(spool, 1, 60);
            if (!wait_for(mark, 60)) return;
            shell("scancel " + job);
        });
        const proc::Result result = executor.run(
            sh(fmt::format("if [ -e '{0}' ]; then echo second; else : > '{0}'; sleep 100; echo first; fi", mark.string()),
               work.path()));
        CHECK(result.ok());
        CHECK(result.stdout_text == "second\n");
        CHECK(executor.retried() == 1);
        bool lost_cancelled = false;
        for (const auto& call : fs::directory_iterator(spool)) {
            lost_cancelled = read_text(call.path() / "attempt-1" / "lost").find("CANCELLED") != std::string::npos;
            CHECK(fs::exists(call.path() / "attempt-2" / "read"));
            CHECK_FALSE(fs::exists(call.path() / "attempt-1" / "result.json"));
        }
        CHECK(lost_cancelled);
    }

    // A job that fails on its node before it writes a result (here: its worker exits 1 once) is
    // retried; a call whose every attempt fails says so, and how each ended.
    {
        const fs::path spool = work.path() / "spool-fail";
        const fs::path once = work.path() / "failed.once";
        const fs::path worker = work.path() / "flaky-worker.sh";
        std::ofstream(worker) << fmt::format("#!/bin/sh\nif [ ! -e '{0}' ]; then : > '{0}'; exit 1; fi\nexec '{1}' \"$@\"\n",
                                             once.string(), std::string(NPUOPT_BINARY));
        fs::permissions(worker, fs::perms::owner_all);
        proc::SlurmExecutor executor(options_for(spool, worker));
        const proc::Result result = executor.run(sh("echo fine", work.path()));
        CHECK(result.ok());
        CHECK(result.stdout_text == "fine\n");
        CHECK(executor.retried() == 1);

        auto failing = options_for(work.path() / "spool-always", "/bin/false");
        failing.retries = 1;
        proc::SlurmExecutor broken(failing);
        const proc::Result gave_up = broken.run(sh("echo never", work.path()));
        CHECK_FALSE(gave_up.started);
        REQUIRE(gave_up.error);
        CHECK(gave_up.error->find("failed 2 time(s)") != std::string::npos);
        CHECK(gave_up.error->find("FAILED") != std::string::npos);
    }

    // An orchestrator killed with a job in flight: `status` lists the job, and the next executor on
    // the spool cancels it without reading a result for it.
    {
        const fs::path spool = work.path() / "spool-killed";
        const pid_t child = ::fork();
        if (child == 0) {
            try {
                proc::SlurmExecutor executor(options_for(spool));
                executor.run(sh("sleep 100", work.path()));
            } catch (...) {
            }
            ::_exit(0);
        }
        const std::string job = submitted_job(spool, 1, 60);
        REQUIRE_FALSE(job.empty());
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        const auto in_flight = proc::jobs_in_flight(spool);
        REQUIRE(in_flight.size() == 1);
        CHECK(in_flight[0].job_id == job);
        proc::SlurmExecutor next(options_for(spool));
        CHECK(proc::jobs_in_flight(spool).empty());
        CHECK(final_state(job) == "CANCELLED");
        bool abandoned = false;
        for (const auto& call : fs::directory_iterator(spool)) {
            abandoned = fs::exists(call.path() / "attempt-1" / "abandoned");
            CHECK_FALSE(fs::exists(call.path() / "attempt-1" / "read"));
        }
        CHECK(abandoned);
    }

    // A pool of workers (array_size 2): one job array serves calls from several threads; a worker
    // task cancelled while it holds a call: the call is queued again and returns one result.
    {
        const fs::path spool = work.path() / "spool-pool";
        auto options = options_for(spool);
        options.array_size = 2;
        options.worker_idle_secs = 60;
        {
            proc::SlurmExecutor executor(options);
            std::vector<std::string> outputs(6);
            {
                std::vector<std::jthread> callers;
                for (int idx = 0; idx < 6; ++idx) {
                    callers.emplace_back([&, idx] {
                        outputs[static_cast<std::size_t>(idx)] =
                            executor.run(sh(fmt::format("echo call {}", idx), work.path())).stdout_text;
                    });
                }
            }
            for (int idx = 0; idx < 6; ++idx) CHECK(outputs[static_cast<std::size_t>(idx)] == fmt::format("call {}\n", idx));
            CHECK(executor.submitted() == 1);  // one array for six calls
            fs::path pool;
            for (const auto& entry : fs::directory_iterator(spool)) {
                if (entry.path().filename().string().rfind("pool-", 0) == 0) pool = entry.path();
            }
            REQUIRE_FALSE(pool.empty());
            const auto in_flight = proc::jobs_in_flight(spool);
            REQUIRE(in_flight.size() == 1);  // the pool's array, while its executor lives
            CHECK(in_flight[0].job_id == read_text(pool / "array_job_id"));

            const fs::path mark = work.path() / "pool.mark";
            std::jthread canceller([&] {
                if (!wait_for(mark, 60)) return;
                for (const auto& entry : fs::directory_iterator(pool / "claimed")) {
                    const std::string name = entry.path().filename().string();
                    shell("scancel " + name.substr(0, name.find('~')));  // the task holding the call
                }
            });
            const proc::Result result = executor.run(
                sh(fmt::format("if [ -e '{0}' ]; then echo second; else : > '{0}'; sleep 100; echo first; fi", mark.string()),
                   work.path()));
            CHECK(result.ok());
            CHECK(result.stdout_text == "second\n");
            CHECK(executor.retried() == 1);
            int lost = 0;
            for (const auto& entry : fs::directory_iterator(pool / "lost")) {
                if (entry.path().extension() == ".why") {
                    ++lost;
                    CHECK(read_text(entry.path()).find("CANCELLED") != std::string::npos);
                }
            }
            CHECK(lost == 1);
        }
        CHECK(proc::jobs_in_flight(spool).empty());  // closed, its array cancelled
    }

    // An orchestrator with a pool killed with kill -9: the next executor cancels its array.
    {
        const fs::path spool = work.path() / "spool-pool-killed";
        auto options = options_for(spool);
        options.array_size = 1;
        const pid_t child = ::fork();
        if (child == 0) {
            try {
                proc::SlurmExecutor executor(options);
                executor.run(sh("sleep 100", work.path()));
            } catch (...) {
            }
            ::_exit(0);
        }
        std::string array;
        for (int look = 0; look < 600 && array.empty(); ++look) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (!fs::is_directory(spool)) continue;
            for (const auto& entry : fs::directory_iterator(spool)) {
                if (fs::exists(entry.path() / "array_job_id")) array = read_text(entry.path() / "array_job_id");
            }
        }
        REQUIRE_FALSE(array.empty());
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        REQUIRE(proc::jobs_in_flight(spool).size() == 1);
        proc::SlurmExecutor next(options_for(spool));
        CHECK(proc::jobs_in_flight(spool).empty());
        CHECK(final_state(array) == "CANCELLED");
    }

    // A campaign on npu-sim whose toolchain calls all go through Slurm (executor: slurm).
    {
        const fs::path campaign = work.path() / "campaign";
        const std::string npuopt = NPUOPT_BINARY;
        REQUIRE(shell(fmt::format("'{}' init '{}' --target npu-sim >/dev/null", npuopt, campaign.string())) == 0);
        REQUIRE(shell(fmt::format("'{}' kb build '{}' --quick >/dev/null 2>&1", npuopt, campaign.string())) == 0);
        std::string yaml = read_text(campaign / "campaign.yaml");
        yaml = std::regex_replace(yaml, std::regex("\n  kind: local"), "\n  kind: slurm");
        std::ofstream(campaign / "campaign.yaml") << yaml;
        const int rc = shell(fmt::format("'{}' run '{}' --max-steps 2 >'{}/run.log' 2>&1", npuopt, campaign.string(),
                                         work.path().string()));
        CHECK_MESSAGE(rc == 0, read_text(work.path() / "run.log"));
        int read = 0;
        for (const auto& call : fs::directory_iterator(campaign / "spool")) {
            if (fs::exists(call.path() / "attempt-1" / "read")) ++read;
        }
        CHECK(read >= 2);  // a compile and launches at least, each a job
        CHECK(proc::jobs_in_flight(campaign / "spool").empty());
        const std::string status = [&] {
            shell(fmt::format("'{}' status '{}' --json >'{}/status.json'", npuopt, campaign.string(), work.path().string()));
            return read_text(work.path() / "status.json");
        }();
        const auto json = nlohmann::json::parse(status, nullptr, false);
        REQUIRE(json.is_object());
        CHECK(json["campaign"]["steps"] == 2);
        CHECK(json["slurm_jobs_in_flight"].empty());
    }
}
