#pragma once
// The subcommands of `npuopt`, as plain functions over parsed options; their flags are declared
// in subcommands.cpp (registry.hpp), which with app.cpp and records_cli.cpp alone sees CLI11.

#include <filesystem>
#include <functional>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

namespace npuopt::cli {

/// Exit codes (documented in --help and README).
inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_failure = 1;
inline constexpr int k_exit_usage = 2;
inline constexpr int k_exit_interrupted = 3;
inline constexpr int k_exit_not_faster = 4;  ///< `npuopt eval`: correct, but not shown faster than its opponent

/// Options every subcommand sees.
struct GlobalOptions {
    bool json = false;
    std::optional<std::filesystem::path> knowledge_dir;
};

struct InitOptions {
    std::filesystem::path dir;
    std::string target;
    std::uint64_t seed = 1;
    std::string shape;  ///< a shape name of the target's kernels.yaml; empty: each kernel's default
};

struct DoctorOptions {
    std::optional<std::string> target;
    std::optional<std::filesystem::path> campaign_dir;
};

struct StatusOptions {
    std::filesystem::path dir;
};

/// `npuopt kb ACTION --campaign DIR`: the knowledge base of a campaign.
struct KbOptions {
    std::string action;                     ///< build | search | show | export | refresh | diff
    std::filesystem::path campaign_dir;
    std::string query;                      ///< search
    std::string format = "md";              ///< show/export: md | json
    std::optional<std::filesystem::path> out;
    std::string old_version;                ///< diff
    std::string new_version;
    bool quick = false;                     ///< build: the short microbenchmark subset
    int limit = 10;                         ///< search
};

/// `npuopt run DIR`.
struct RunOptions {
    std::filesystem::path dir;
    std::optional<double> budget_minutes;
    std::optional<std::int64_t> device_runs;
    std::optional<std::int64_t> max_steps;
    bool stream_json = false;  ///< --message-format json: one JSON object per line per event, on stdout
    /// Wall time kept back for work after the run (demo: the submission); see CampaignOptions.
    std::function<double(double mean_launch_secs)> wall_reserve_secs;
};

/// `npuopt tree show KERNEL | export`.
struct TreeOptions {
    std::string action;                     ///< show | export
    std::string kernel;
    std::filesystem::path campaign_dir;
    std::optional<std::filesystem::path> out;
    bool reasons = false;
};

/// `npuopt submit DIR`.
struct SubmitCliOptions {
    std::filesystem::path dir;
    std::optional<std::filesystem::path> out;
    int runs = 7;
};

/// `npuopt report DIR`.
struct ReportOptions {
    std::filesystem::path dir;
    std::optional<std::filesystem::path> out;
};

/// `npuopt serve DIR`.
struct ServeOptions {
    std::filesystem::path dir;
    std::string bind = "127.0.0.1";
    int port = 8765;
    bool allow_remote = false;
    bool require_token = false;
};

/// `npuopt bench kb|acceptance|search`.
struct BenchOptions {
    std::string what;
    std::optional<std::int64_t> device_runs;
    std::vector<std::string> extra_args;    ///< passed through to the benchmark program
    std::string argv0;                      ///< how npuopt was started (finds programs beside it)
};

/// `npuopt eval FILE --kernel K`.
struct EvalOptions {
    std::filesystem::path file;
    std::string kernel;
    std::optional<std::filesystem::path> campaign_dir;  ///< none: a scratch campaign, removed afterwards
    std::string against = "champion";                   ///< champion | baseline | a kernel file
    std::string target = "npu-sim";                     ///< the scratch campaign's target
    std::optional<std::uint64_t> seed;                  ///< the scratch campaign's seed (default: drawn now)
};

/// `npuopt add FILE --kernel K --campaign C`: a person's kernel into the tree as a design, raced.
struct AddOptions {
    std::filesystem::path file;
    std::string kernel;
    std::filesystem::path campaign_dir;
    bool queue_only = false;                ///< record and queue it; the next `npuopt run` races it
};

/// `npuopt demo [DIR]`.
struct DemoOptions {
    std::optional<std::filesystem::path> dir;
    double minutes = 10.0;
    bool full_kb = false;                   ///< the whole microbenchmark suite (slower)
};

/// `npuopt init DIR --target NAME`: a campaign directory with campaign.yaml and campaign.db.
int run_init(const GlobalOptions& global, const InitOptions& options);
/// `npuopt doctor`: checks target, toolchain, sandbox, database, disk; exit 1 when one fails.
int run_doctor(const GlobalOptions& global, const DoctorOptions& options);
/// `npuopt status DIR`: what the campaign database holds.
int run_status(const GlobalOptions& global, const StatusOptions& options);
/// `npuopt kb …`: build, search, show, export, refresh, diff.
int run_kb(const GlobalOptions& global, const KbOptions& options);
/// `npuopt run DIR`: run or resume the campaign; exit 3 when interrupted.
int run_run(const GlobalOptions& global, const RunOptions& options);
/// `npuopt tree show|export`.
int run_tree(const GlobalOptions& global, const TreeOptions& options);
/// `npuopt submit DIR`: the submission directory, tarball, manifest and replay log.
int run_submit(const GlobalOptions& global, const SubmitCliOptions& options);
/// `npuopt report DIR`: Markdown and HTML/SVG report.
int run_report(const GlobalOptions& global, const ReportOptions& options);
/// `npuopt serve DIR`: the live dashboard until SIGINT/SIGTERM.
int run_serve(const GlobalOptions& global, const ServeOptions& options);
/// `npuopt bench …`: the benchmark programs.
int run_bench(const GlobalOptions& global, const BenchOptions& options);
/// `npuopt eval`: a user's kernel through the cascade and a race; exit 0 faster, 4 correct but not
/// faster, 1 failed a check.
int run_eval(const GlobalOptions& global, const EvalOptions& options);
/// `npuopt demo`: init, kb build, a budgeted campaign and a submission, ending in the results table.
int run_demo(const GlobalOptions& global, const DemoOptions& options);

int run_add(const GlobalOptions& global, const AddOptions& options);

}  // namespace npuopt::cli
