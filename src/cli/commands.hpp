#pragma once
// The subcommands of `npuopt`, as plain functions over parsed options. Only app.cpp sees CLI11.

#include <filesystem>
#include <optional>
#include <string>

namespace npuopt::cli {

/// Exit codes (documented in --help and README).
inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_failure = 1;
inline constexpr int k_exit_usage = 2;
inline constexpr int k_exit_interrupted = 3;

/// Options every subcommand sees.
struct GlobalOptions {
    bool json = false;
    std::optional<std::filesystem::path> knowledge_dir;
};

struct InitOptions {
    std::filesystem::path dir;
    std::string target;
    std::uint64_t seed = 1;
};

struct DoctorOptions {
    std::optional<std::string> target;
    std::optional<std::filesystem::path> campaign_dir;
};

struct StatusOptions {
    std::filesystem::path dir;
};

/// `npuopt init DIR --target NAME`: a campaign directory with campaign.yaml and campaign.db.
int run_init(const GlobalOptions& global, const InitOptions& options);
/// `npuopt doctor`: checks target, toolchain, sandbox, database, disk; exit 1 when one fails.
int run_doctor(const GlobalOptions& global, const DoctorOptions& options);
/// `npuopt status DIR`: what the campaign database holds.
int run_status(const GlobalOptions& global, const StatusOptions& options);

}  // namespace npuopt::cli
