#pragma once
// `npuopt eval`: a user's own kernel file through the whole evaluation cascade and a race against
// an opponent (the campaign's champion, the baseline, or another file), recorded in the campaign's
// database like any design. The opponent is re-measured first (checked launches), so the screen
// and the race compare with what the device says now. The screen's and estimate's cut-offs are
// off: every correct candidate is raced, so the answer always carries a speedup and its interval.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/cascade.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::campaign {

/// What `npuopt eval` asks.
struct UserEvalOptions {
    std::filesystem::path file;           ///< the user's kernel source
    std::string kernel;                   ///< a kernel of the campaign's kernels.yaml
    std::string against = "champion";     ///< champion | baseline | a path to another kernel file
    int opponent_runs = 3;                ///< checked launches that measure the opponent
    std::function<void(const std::string&)> on_progress;
};

/// How the evaluation ended, as `npuopt eval` reports it and maps to its exit code.
enum class UserVerdict {
    accepted,    ///< passed every stage and the race says it is faster than the opponent
    not_faster,  ///< passed every check, but the race did not show it faster (reject or inconclusive)
    failed,      ///< failed or was rejected by a check (compile, correctness, a checked race launch, ...)
};
std::string user_verdict_name(UserVerdict verdict);

/// The opponent of the race.
struct UserOpponent {
    std::string kind;                     ///< champion | baseline | file
    std::string label;                    ///< e.g. "design 12 (ffn_tiled)" or the file's path
    std::string content_hash;
    std::int64_t design_id = 0;
    std::optional<double> cycles_median;  ///< from its checked measurement now
    std::vector<double> cycles;
    std::string note;                     ///< e.g. why a champion was asked for and the baseline raced
};

struct UserEvalResult {
    std::string kernel;
    std::filesystem::path file;
    std::string content_hash;
    std::int64_t design_id = 0;
    UserOpponent opponent;
    eval::Outcome outcome;
    UserVerdict verdict = UserVerdict::failed;
    std::string summary;                  ///< one line: the verdict and why
};

/// Evaluate `options.file` in `workspace` (which the caller has locked). Error(invalid_input) for
/// an unknown kernel, an unreadable file or opponent; an opponent that fails its own checks is an
/// Error(toolchain) (no race against a wrong kernel).
UserEvalResult evaluate_user_kernel(Workspace& workspace, const UserEvalOptions& options);

nlohmann::json user_eval_json(const UserEvalResult& result);
std::string render_user_eval_text(const UserEvalResult& result);

}  // namespace npuopt::campaign
