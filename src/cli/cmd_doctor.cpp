// `npuopt doctor [--target NAME | --campaign DIR]`: is everything in place to run a campaign?

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

}  // namespace

int run_doctor(const GlobalOptions& global, const DoctorOptions& options) {
    std::vector<Check> checks;
    std::optional<config::CampaignConfig> campaign;
    std::optional<std::string> target_name = options.target;
    std::optional<fs::path> campaign_dir;
    if (options.campaign_dir) campaign_dir = fs::absolute(*options.campaign_dir).lexically_normal();
    if (!target_name && !campaign_dir && fs::is_regular_file(fs::path(config::k_campaign_file_name))) {
        campaign_dir = fs::current_path();
    }

    std::optional<fs::path> knowledge_dir;
    {
        Check check("knowledge dir");
        try {
            knowledge_dir = config::locate_knowledge_dir(global.knowledge_dir);
            check.detail = knowledge_dir->string();
        } catch (const Error& error) {
            check.status = CheckStatus::fail;
            check.config_error = true;
            check.detail = error.what();
            check.fix = "pass --knowledge-dir or set NPUOPT_KNOWLEDGE_DIR to the repository's knowledge/ folder";
        }
        checks.push_back(check);
    }

    if (campaign_dir) {
        Check check("campaign.yaml");
        fs::path file = *campaign_dir / config::k_campaign_file_name;
        try {
            campaign = config::load_campaign_config(file);
            target_name = campaign->target;
            check.detail = fmt::format("{} (target {})", file.string(), campaign->target);
        } catch (const Error& error) {
            check.status = CheckStatus::fail;
            check.config_error = true;
            check.detail = error.what();
            check.fix = fmt::format("correct {} at the line named above (`npuopt init` writes a commented example)",
                                    file.string());
        }
        checks.push_back(check);
    }

    if (!target_name && knowledge_dir && !campaign_dir) {
        auto known = config::list_targets(*knowledge_dir);
        if (known.size() == 1) {
            target_name = known.front();
        } else {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("doctor needs --target NAME or --campaign DIR (known targets: {})",
                                    fmt::join(known, ", ")));
        }
    }

    std::optional<config::TargetConfig> target;
    if (target_name && knowledge_dir) {
        Check check("target.yaml");
        try {
            target = config::load_target(*knowledge_dir, *target_name);
            check.detail = fmt::format("{} ({} public facts)", (target->dir / "target.yaml").string(), target->facts.size());
        } catch (const Error& error) {
            check.status = CheckStatus::fail;
            check.config_error = true;
            check.detail = error.what();
            check.fix = "correct target.yaml at the line named above, or pick a known target";
        }
        checks.push_back(check);
    }

    if (target) {
        Check check("kernels.yaml");
        try {
            auto kernels = config::load_kernels_config(target->kernels_file, target->templates_dir);
            if (campaign) config::check_campaign_kernels(*campaign, kernels);
            std::vector<std::string> names;
            std::vector<std::string> missing_baselines;
            for (const auto& kernel : kernels.kernels) {
                names.push_back(kernel.name);
                if (!fs::is_regular_file(kernel.baseline)) missing_baselines.push_back(kernel.baseline.string());
            }
            check.detail = fmt::format("{} kernels: {}", names.size(), fmt::join(names, ", "));
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
        checks.push_back(check);
    }

    proc::SandboxStatus sandbox = proc::probe_sandbox();
    bool sandbox_required = campaign ? campaign->sandbox.required : false;
    {
        Check check("sandbox");
        if (sandbox.available) {
            check.detail = fmt::format("bubblewrap works ({})", sandbox.bwrap_path);
        } else {
            check.status = sandbox_required ? CheckStatus::fail : CheckStatus::warn;
            check.detail = fmt::format("bubblewrap is not usable: {}{}", sandbox.reason,
                                       sandbox_required ? " (campaign.yaml requires it)" : "; generated code would run UNSANDBOXED");
            check.fix = "install it (`sudo apt-get install bubblewrap`) and allow unprivileged user namespaces "
                        "(sysctl kernel.unprivileged_userns_clone=1); or set sandbox.required: false in campaign.yaml";
        }
        checks.push_back(check);
    }

    {
        Check check("limits");
        const proc::LimitSupport limits = proc::limit_support();
        check.detail = fmt::format("{}: {}", proc::limit_mechanism_name(limits.mechanism), limits.detail);
        if (!limits.unenforced.empty()) {
            check.status = CheckStatus::warn;
            check.detail += fmt::format("; NOT enforced: {}", fmt::join(limits.unenforced, "; "));
            check.fix = "run npuopt where it can make cgroups: as root with cgroup v2 (memory and pids) or the v1 "
                        "memory and pids controllers mounted, or in a delegated cgroup "
                        "(`systemd-run --user --scope -p Delegate=yes npuopt ...`)";
        }
        checks.push_back(check);
    }

    if (target) {
        Check check("toolchain");
        if (campaign) config::apply_campaign_overrides(*campaign, *target);
        proc::SandboxPolicy policy;
        policy.enabled = sandbox.available || sandbox_required;
        policy.required = sandbox_required;
        if (campaign) policy.scratch_dir = campaign->dir / "scratch";
        proc::Limits limits = limits_for(campaign ? campaign->sandbox : config::SandboxConfig{});
        std::string fix = fmt::format(
            "build or install the toolchain ('{}'): for npu-sim run `tools/quickstart-run.sh` (or `cmake --build build`, "
            "needs cargo); or set toolchain.bin in campaign.yaml to its path; or add its folder to PATH",
            target->toolchain.bin);
        try {
            target::Toolchain toolchain(*target, policy, limits);
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
                } else {
                    check.status = CheckStatus::fail;
                    check.detail = fmt::format("{} found but `version` failed: {}", bin->string(), version.call.message);
                    if (!version.call.process.stderr_text.empty()) {
                        check.detail += fmt::format(" (stderr: {})", version.call.process.stderr_text.substr(0, 400));
                    }
                    check.fix = "run the version command by hand to see why; rebuild or reinstall the toolchain";
                }
            }
        } catch (const Error& error) {
            check.status = CheckStatus::fail;
            check.detail = error.what();
            check.fix = fix;
        }
        checks.push_back(check);
    }

    check_database(checks, campaign_dir);
    check_disk(checks, campaign_dir ? *campaign_dir : fs::temp_directory_path());

    int failures = 0;
    const Check* first_config_error = nullptr;
    for (const Check& check : checks) {
        if (check.status == CheckStatus::fail) ++failures;
        if (check.config_error && first_config_error == nullptr) first_config_error = &check;
    }

    if (global.json) {
        nlohmann::json out = {{"ok", failures == 0}, {"target", target_name.value_or("")}, {"checks", nlohmann::json::array()}};
        if (campaign_dir) out["campaign"] = campaign_dir->string();
        out["limit_mechanism"] = std::string(proc::limit_mechanism_name(proc::limit_support().mechanism));
        for (const Check& check : checks) {
            out["checks"].push_back({{"name", check.name},
                                     {"status", std::string(status_label(check.status))},
                                     {"detail", check.detail},
                                     {"fix", check.fix}});
        }
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << fmt::format("npuopt doctor — {}\n",
                                 campaign_dir ? "campaign " + campaign_dir->string()
                                              : "target " + target_name.value_or("?"));
        for (const Check& check : checks) {
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

}  // namespace npuopt::cli
