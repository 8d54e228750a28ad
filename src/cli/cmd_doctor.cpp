// `npuopt doctor [--target NAME | --campaign DIR]`: is everything in place to run a campaign?

#include <chrono>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "proc/subprocess.hpp"
#include "store/campaign_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::cli {
namespace {

namespace fs = std::filesystem;

enum class CheckStatus { ok, warn, fail };

/// One line of the doctor's report.
struct Check {
    explicit Check(std::string check_name) : name(std::move(check_name)) {}
    std::string name;
    CheckStatus status = CheckStatus::ok;
    std::string detail;
    std::string fix;
    bool config_error = false;  ///< a configuration file is invalid: exit 2
};

constexpr std::uint64_t k_disk_warn_bytes = 1ull << 30;
constexpr std::uint64_t k_disk_fail_bytes = 100ull << 20;

std::string_view status_label(CheckStatus status) {
    switch (status) {
        case CheckStatus::ok: return "OK";
        case CheckStatus::warn: return "WARN";
        case CheckStatus::fail: return "FAIL";
    }
    return "FAIL";
}

proc::Limits limits_for(const config::SandboxConfig& sandbox) {
    proc::Limits limits;
    limits.memory_bytes = static_cast<std::uint64_t>(sandbox.memory_mb) << 20;
    limits.cpu_secs = static_cast<std::uint64_t>(sandbox.cpu_secs);
    limits.file_bytes = static_cast<std::uint64_t>(sandbox.file_mb) << 20;
    limits.processes = static_cast<std::uint64_t>(sandbox.processes);
    return limits;
}

void check_database(std::vector<Check>& checks, const std::optional<fs::path>& campaign_dir) {
    Check check("database");
    try {
        if (campaign_dir) {
            fs::path db_file = *campaign_dir / config::k_campaign_db_name;
            store::Database::Options options;
            options.create = false;
            options.migrate = false;
            auto database = store::Database::open(db_file, options);
            int version = database.schema_version();
            std::string integrity = database.integrity_check();
            if (integrity != "ok") {
                check.status = CheckStatus::fail;
                check.detail = fmt::format("{} is damaged: {}", db_file.string(), integrity);
                check.fix = "restore it from a backup, or start a new campaign with `npuopt init`";
            } else if (version != store::current_schema_version()) {
                check.status = CheckStatus::fail;
                check.detail = fmt::format("{} is at schema v{}, this npuopt uses v{}", db_file.string(), version,
                                           store::current_schema_version());
                check.fix = fmt::format("migrate it: `npuopt status {}` upgrades the schema in place",
                                        campaign_dir->string());
            } else {
                check.detail = fmt::format("{} (schema v{}, {}, integrity ok)", db_file.string(), version,
                                           database.journal_mode());
            }
        } else {
            std::random_device random;
            fs::path scratch = fs::temp_directory_path() / fmt::format("npuopt-doctor-{}", random());
            fs::create_directories(scratch);
            {
                auto database = store::Database::open(scratch / "probe.db");
                check.detail = fmt::format("SQLite works (a new database migrates to schema v{}, journal {})",
                                           database.schema_version(), database.journal_mode());
            }
            std::error_code ignored;
            fs::remove_all(scratch, ignored);
        }
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.detail = error.what();
        check.fix = campaign_dir ? "is this a campaign directory? create one with `npuopt init DIR --target NAME`"
                                 : "check that the temp directory is writable and SQLite is installed (libsqlite3)";
    }
    checks.push_back(check);
}

void check_disk(std::vector<Check>& checks, const fs::path& where) {
    Check check("disk space");
    std::error_code error_code;
    fs::space_info space = fs::space(where, error_code);
    if (error_code) {
        check.status = CheckStatus::warn;
        check.detail = fmt::format("cannot read free space of {}: {}", where.string(), error_code.message());
    } else {
        check.detail = fmt::format("{:.1f} GiB free at {}", static_cast<double>(space.available) / (1ull << 30),
                                   where.string());
        if (space.available < k_disk_fail_bytes) {
            check.status = CheckStatus::fail;
            check.fix = "free some space: a campaign needs at least 100 MiB (1 GiB recommended)";
        } else if (space.available < k_disk_warn_bytes) {
            check.status = CheckStatus::warn;
            check.fix = "less than 1 GiB free; a long campaign may run out";
        }
    }
    checks.push_back(check);
}


/// Why a toolchain call on the smoke kernel failed, in a line: its error diagnostics (code and
/// message), else its error line or status, else the tail of its stderr.
std::string describe_failure(const target::CallInfo& call, const std::vector<target::Diagnostic>& diagnostics) {
    std::vector<std::string> errors;
    for (const auto& diagnostic : diagnostics) {
        if (diagnostic.level != "error") continue;
        std::string text = diagnostic.code.empty() ? diagnostic.message : diagnostic.code + " " + diagnostic.message;
        for (const auto& note : diagnostic.notes) text += fmt::format(" ({})", note);
        errors.push_back(std::move(text));
        if (errors.size() == 3) break;
    }
    std::string why = fmt::format("{}", fmt::join(errors, "; "));
    if (why.empty()) why = call.message;
    if (why.empty()) why = std::string(target::call_status_name(call.status));
    std::string stderr_text = call.process.stderr_text;
    while (!stderr_text.empty() && (stderr_text.back() == '\n' || stderr_text.back() == ' ')) stderr_text.pop_back();
    if (errors.empty() && !stderr_text.empty()) {
        const std::size_t keep = 400;
        why += fmt::format(" (stderr: {})",
                           stderr_text.size() > keep ? "…" + stderr_text.substr(stderr_text.size() - keep) : stderr_text);
    }
    return why;
}

/// The toolchain end to end, as a campaign's first step uses it: the first kernel's baseline
/// compiled, checked and run once with the correctness check, in the sandbox, with a compile
/// cache of its own (removed after). Its default shape: the one its baseline is known to pass.
void check_end_to_end(std::vector<Check>& checks, target::Toolchain& toolchain, const config::KernelsConfig& kernels,
                      bool sandboxed) {
    Check check("end to end");
    const config::KernelSpec* kernel = nullptr;
    for (const auto& candidate : kernels.kernels) {
        if (fs::is_regular_file(candidate.baseline)) {
            kernel = &candidate;
            break;
        }
    }
    if (kernel == nullptr) {
        check.status = CheckStatus::fail;
        check.detail = "no kernel of kernels.yaml has a baseline design to compile and run";
        check.fix = "add the baselines to the target's templates folder (dsl_templates/<target>/)";
        checks.push_back(check);
        return;
    }
    const std::string file_name = kernel->baseline.filename().string();
    const std::string by_hand = fmt::format(
        "run the toolchain's check and run commands on {} by hand to see their whole output; a toolchain that "
        "compiles with another program needs it installed and runnable inside the sandbox (npu-sim: the rustc "
        "that npuc's lib/npuc.conf names, the one it was built with; rebuild it with `cmake --build build`)",
        kernel->baseline.string());
    std::random_device random;
    const fs::path cache = fs::temp_directory_path() / fmt::format("npuopt-doctor-cache-{}", random());
    const fs::path previous_cache = toolchain.cache_dir();
    toolchain.set_cache_dir(cache);
    try {
        const auto started = std::chrono::steady_clock::now();
        target::CheckResult built = toolchain.check(kernel->baseline, kernel->name, kernel->shape);
        const std::chrono::duration<double> compile_secs = std::chrono::steady_clock::now() - started;
        if (built.call.status != target::CallStatus::ok || !built.ok) {
            check.status = CheckStatus::fail;
            check.detail = fmt::format("{} did not compile: {}", file_name, describe_failure(built.call, built.diagnostics));
            check.fix = by_hand;
        } else {
            target::RunRequest request;
            request.file = kernel->baseline;
            request.kernel = kernel->name;
            request.seed = 1;
            request.repeat = 1;
            request.check = true;
            request.shape = kernel->shape;
            // A device may fail a launch transiently (the toolchain says so: CallStatus::transient);
            // the campaign retries those, and so does this check, three times, before it fails.
            target::RunResult ran = toolchain.run(request);
            int transient_retries = 0;
            while (ran.call.status == target::CallStatus::transient && transient_retries < 3) {
                ++transient_retries;
                ran = toolchain.run(request);
            }
            const std::string retried =
                transient_retries > 0 ? fmt::format(" (after {} transient device error(s), retried)", transient_retries) : "";
            if (ran.verify && !ran.verify->passed) {
                check.status = CheckStatus::fail;
                check.detail = fmt::format("{} ran, but its output check failed ({} of {} elements wrong): the "
                                           "toolchain computes wrong results",
                                           file_name, ran.verify->mismatches, ran.verify->elements);
                check.fix = "the baseline is correct by construction: the toolchain or its device is broken; "
                            "rebuild or reinstall it";
            } else if (ran.call.status != target::CallStatus::ok || ran.cycles.empty()) {
                check.status = CheckStatus::fail;
                check.detail = fmt::format("{} compiled but did not run{}: {}", file_name, retried,
                                           describe_failure(ran.call, ran.diagnostics));
                check.fix = by_hand;
            } else if (!ran.verify) {
                check.status = CheckStatus::fail;
                check.detail = fmt::format("{} ran, but the toolchain reported no output check", file_name);
                check.fix = "the run command must check outputs when asked ({check} in target.yaml's run argv, "
                            "docs/toolchain-protocol.md)";
            } else {
                check.detail = fmt::format("{} ({}, shape {}) compiled and checked in {:.1f} s, ran {} in {:.1f} s: "
                                           "{:.0f} cycles, output check passed{}",
                                           file_name, kernel->name, kernel->shape_name, compile_secs.count(),
                                           sandboxed ? "in the sandbox" : "UNSANDBOXED", ran.call.process.wall_secs,
                                           ran.cycles.front(), retried);
            }
        }
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.detail = fmt::format("{}: {}", file_name, error.what());
        check.fix = by_hand;
    }
    toolchain.set_cache_dir(previous_cache);
    std::error_code ignored;
    fs::remove_all(cache, ignored);
    checks.push_back(check);
}

/// What the checks found so far: later checks read what earlier ones loaded.
struct DoctorState {
    std::vector<Check> checks;
    std::optional<fs::path> knowledge_dir;
    std::optional<fs::path> campaign_dir;
    std::optional<config::CampaignConfig> campaign;
    std::optional<std::string> target_name;
    std::optional<config::TargetConfig> target;
    std::optional<config::KernelsConfig> kernels_config;
    proc::SandboxStatus sandbox;
    bool sandbox_required = false;
};

/// The knowledge/ folder every target is read from.
void check_knowledge_dir(DoctorState& state, const GlobalOptions& global) {
    Check check("knowledge dir");
    try {
        state.knowledge_dir = config::locate_knowledge_dir(global.knowledge_dir);
        check.detail = state.knowledge_dir->string();
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.config_error = true;
        check.detail = error.what();
        check.fix = "pass --knowledge-dir or set NPUOPT_KNOWLEDGE_DIR to the repository's knowledge/ folder";
    }
    state.checks.push_back(check);
}

/// The campaign's campaign.yaml, which names its target.
void check_campaign_file(DoctorState& state) {
    if (!state.campaign_dir) return;
    Check check("campaign.yaml");
    fs::path file = *state.campaign_dir / config::k_campaign_file_name;
    try {
        state.campaign = config::load_campaign_config(file);
        state.target_name = state.campaign->target;
        check.detail = fmt::format("{} (target {})", file.string(), state.campaign->target);
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.config_error = true;
        check.detail = error.what();
        check.fix =
            fmt::format("correct {} at the line named above (`npuopt init` writes a commented example)", file.string());
    }
    state.checks.push_back(check);
}

/// Without --target or a campaign, the only known target (else an error that lists them).
void pick_target(DoctorState& state) {
    if (!(!state.target_name && state.knowledge_dir && !state.campaign_dir)) return;
    auto known = config::list_targets(*state.knowledge_dir);
    if (known.size() == 1) {
        state.target_name = known.front();
    } else {
        throw Error(
            ErrorKind::invalid_input,
            fmt::format("doctor needs --target NAME or --campaign DIR (known targets: {})", fmt::join(known, ", ")));
    }
}

/// The target's target.yaml.
void check_target(DoctorState& state) {
    if (!(state.target_name && state.knowledge_dir)) return;
    Check check("target.yaml");
    try {
        state.target = config::load_target(*state.knowledge_dir, *state.target_name);
        check.detail = fmt::format("{} ({} public facts)", (state.target->dir / "target.yaml").string(),
                                   state.target->facts.size());
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.config_error = true;
        check.detail = error.what();
        check.fix = "correct target.yaml at the line named above, or pick a known target";
    }
    state.checks.push_back(check);
}

/// The target's kernels.yaml and the baselines it names.
void check_kernels(DoctorState& state) {
    if (!state.target) return;
    Check check("kernels.yaml");
    try {
        auto kernels = config::load_kernels_config(state.target->kernels_file, state.target->templates_dir);
        if (state.campaign) config::check_campaign_kernels(*state.campaign, kernels);
        std::vector<std::string> names;
        std::vector<std::string> missing_baselines;
        for (const auto& kernel : kernels.kernels) {
            names.push_back(kernel.name);
            if (!fs::is_regular_file(kernel.baseline)) missing_baselines.push_back(kernel.baseline.string());
        }
        check.detail = fmt::format("{} kernels: {}", names.size(), fmt::join(names, ", "));
        state.kernels_config = std::move(kernels);
        if (!missing_baselines.empty()) {
            check.status = CheckStatus::warn;
            check.detail += fmt::format("; baseline designs missing: {}", fmt::join(missing_baselines, ", "));
            check.fix = "the baselines live in the target's templates folder (dsl_templates/<target>/)";
        }
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.config_error = error.kind() == ErrorKind::invalid_config || error.kind() == ErrorKind::invalid_input;
        check.detail = error.what();
        check.fix = "correct the file at the line named above";
    }
    state.checks.push_back(check);
}

/// Whether bubblewrap works (required when campaign.yaml says so).
void check_sandbox(DoctorState& state) {
    Check check("sandbox");
    if (state.sandbox.available) {
        check.detail = fmt::format("bubblewrap works ({})", state.sandbox.bwrap_path);
    } else {
        check.status = state.sandbox_required ? CheckStatus::fail : CheckStatus::warn;
        check.detail = fmt::format(
            "bubblewrap is not usable: {}{}", state.sandbox.reason,
            state.sandbox_required ? " (campaign.yaml requires it)" : "; generated code would run UNSANDBOXED");
        check.fix =
            "install it (`sudo apt-get install bubblewrap`) and allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1); or set sandbox.required: false in campaign.yaml";
    }
    state.checks.push_back(check);
}

/// Which per-call limits the machine can enforce.
void check_limits(DoctorState& state) {
    Check check("limits");
    const proc::LimitSupport limits = proc::limit_support();
    check.detail = fmt::format("{}: {}", proc::limit_mechanism_name(limits.mechanism), limits.detail);
    if (!limits.unenforced.empty()) {
        check.status = CheckStatus::warn;
        check.detail += fmt::format("; NOT enforced: {}", fmt::join(limits.unenforced, "; "));
        check.fix =
            "run npuopt where it can make cgroups: as root with cgroup v2 (memory and pids) or the v1 "
            "memory and pids controllers mounted, or in a delegated cgroup "
            "(`systemd-run --user --scope -p Delegate=yes npuopt ...`)";
    }
    state.checks.push_back(check);
}

/// The toolchain found and its version, then the first baseline end to end.
void check_toolchain(DoctorState& state) {
    if (!state.target) return;
    Check check("toolchain");
    if (state.campaign) config::apply_campaign_overrides(*state.campaign, *state.target);
    proc::SandboxPolicy policy;
    policy.enabled = state.sandbox.available || state.sandbox_required;
    policy.required = state.sandbox_required;
    if (state.campaign) policy.scratch_dir = state.campaign->dir / "scratch";
    proc::Limits limits = limits_for(state.campaign ? state.campaign->sandbox : config::SandboxConfig{});
    std::string fix = fmt::format(
        "build or install the toolchain ('{}'): for npu-sim run `tools/quickstart-run.sh` (or `cmake --build build`, "
        "needs cargo); or set toolchain.bin in campaign.yaml to its path; or add its folder to PATH",
        state.target->toolchain.bin);
    bool toolchain_works = false;
    try {
        target::Toolchain toolchain(*state.target, policy, limits);
        std::string why;
        auto bin = toolchain.resolve_bin(&why);
        if (!bin) {
            check.status = CheckStatus::fail;
            check.detail = why;
            check.fix = fix;
        } else {
            target::VersionResult version = toolchain.version();
            if (version.call.status == target::CallStatus::ok) {
                check.detail = fmt::format("{} {} at {}", version.name, version.version, bin->string());
                toolchain_works = true;
            } else {
                check.status = CheckStatus::fail;
                check.detail = fmt::format("{} found but `version` failed: {}", bin->string(), version.call.message);
                if (!version.call.process.stderr_text.empty()) {
                    check.detail += fmt::format(" (stderr: {})", version.call.process.stderr_text.substr(0, 400));
                }
                check.fix = "run the version command by hand to see why; rebuild or reinstall the toolchain";
            }
        }
        state.checks.push_back(check);
        if (toolchain_works && state.kernels_config)
            check_end_to_end(state.checks, toolchain, *state.kernels_config, policy.enabled);
    } catch (const Error& error) {
        check.status = CheckStatus::fail;
        check.detail = error.what();
        check.fix = fix;
        state.checks.push_back(check);
    }
}

/// The checks as text or JSON; the exit code (2 for the first invalid configuration file).
int print_report(const DoctorState& state, const GlobalOptions& global) {
    int failures = 0;
    const Check* first_config_error = nullptr;
    for (const Check& check : state.checks) {
        if (check.status == CheckStatus::fail) ++failures;
        if (check.config_error && first_config_error == nullptr) first_config_error = &check;
    }

    if (global.json) {
        nlohmann::json out = {
            {"ok", failures == 0}, {"target", state.target_name.value_or("")}, {"checks", nlohmann::json::array()}};
        if (state.campaign_dir) out["campaign"] = state.campaign_dir->string();
        out["limit_mechanism"] = std::string(proc::limit_mechanism_name(proc::limit_support().mechanism));
        for (const Check& check : state.checks) {
            out["checks"].push_back({{"name", check.name},
                                     {"status", std::string(status_label(check.status))},
                                     {"detail", check.detail},
                                     {"fix", check.fix}});
        }
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << fmt::format("npuopt doctor — {}\n", state.campaign_dir
                                                             ? "campaign " + state.campaign_dir->string()
                                                             : "target " + state.target_name.value_or("?"));
        for (const Check& check : state.checks) {
            std::cout << fmt::format("  {:<5} {:<14} {}\n", status_label(check.status), check.name, check.detail);
            if (check.status != CheckStatus::ok && !check.fix.empty()) {
                std::cout << fmt::format("  {:<5} {:<14} fix: {}\n", "", "", check.fix);
            }
        }
        std::cout << (failures == 0 ? std::string("all checks passed\n")
                                    : fmt::format("{} check{} failed\n", failures, failures == 1 ? "" : "s"));
    }
    if (first_config_error != nullptr) {
        std::cerr << fmt::format("npuopt: error: {}\n", first_config_error->detail);
        return k_exit_usage;
    }
    return failures == 0 ? k_exit_ok : k_exit_failure;
}

}  // namespace

int run_doctor(const GlobalOptions& global, const DoctorOptions& options) {
    DoctorState state;
    state.target_name = options.target;
    if (options.campaign_dir) state.campaign_dir = fs::absolute(*options.campaign_dir).lexically_normal();
    if (!state.target_name && !state.campaign_dir && fs::is_regular_file(fs::path(config::k_campaign_file_name))) {
        state.campaign_dir = fs::current_path();
    }
    check_knowledge_dir(state, global);
    check_campaign_file(state);
    pick_target(state);
    check_target(state);
    check_kernels(state);
    state.sandbox = proc::probe_sandbox();
    state.sandbox_required = state.campaign ? state.campaign->sandbox.required : false;
    check_sandbox(state);
    check_limits(state);
    check_toolchain(state);
    check_database(state.checks, state.campaign_dir);
    check_disk(state.checks, state.campaign_dir ? *state.campaign_dir : fs::temp_directory_path());
    return print_report(state, global);
}

}  // namespace npuopt::cli
