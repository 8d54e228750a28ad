// `npuopt eval FILE --kernel K [--campaign C] [--against champion|baseline|FILE2]`: a user's own
// kernel through the whole cascade and a race; without --campaign in a scratch campaign that is
// removed afterwards.

#include <cstdlib>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/lock.hpp"
#include "cli/commands.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "campaign/campaign_init.hpp"
#include "campaign/user_eval.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::cli {
namespace {

namespace fs = std::filesystem;

/// A private scratch directory, removed with everything in it when the command ends.
class ScratchCampaignDir {
public:
    ScratchCampaignDir() {
        std::error_code error_code;
        fs::path base = fs::temp_directory_path(error_code);
        if (error_code) base = "/tmp";
        std::string pattern = (base / "npuopt-eval-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw Error(ErrorKind::io, fmt::format("eval: cannot create a scratch campaign under {}", base.string()));
        }
        m_path = pattern;
    }
    ~ScratchCampaignDir() {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    ScratchCampaignDir(const ScratchCampaignDir&) = delete;
    ScratchCampaignDir& operator=(const ScratchCampaignDir&) = delete;
    const fs::path& path() const { return m_path; }

private:
    fs::path m_path;
};

int exit_code_of(campaign::UserVerdict verdict) {
    switch (verdict) {
        case campaign::UserVerdict::accepted: return k_exit_ok;
        case campaign::UserVerdict::not_faster: return k_exit_not_faster;
        case campaign::UserVerdict::failed: return k_exit_failure;
    }
    return k_exit_failure;
}

}  // namespace

int run_eval(const GlobalOptions& global, const EvalOptions& options) {
    if (options.kernel.empty()) throw Error(ErrorKind::invalid_input, "eval: --kernel is required");
    std::error_code error_code;
    if (!fs::is_regular_file(options.file, error_code)) {
        throw Error(ErrorKind::invalid_input, fmt::format("eval: {} is not a readable file", options.file.string()));
    }
    std::optional<ScratchCampaignDir> scratch;
    fs::path campaign_dir;
    if (options.campaign_dir) {
        campaign_dir = *options.campaign_dir;
    } else {
        // Validate the target and kernel before making anything.
        const fs::path knowledge_dir = config::locate_knowledge_dir(global.knowledge_dir);
        const config::TargetConfig target = config::load_target(knowledge_dir, options.target);
        const config::KernelsConfig kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
        std::vector<std::string> kernel_names;
        for (const auto& kernel : kernels.kernels) kernel_names.push_back(kernel.name);
        // A scratch campaign's seed is drawn now unless given: nothing a kernel could know in advance.
        const std::uint64_t seed = options.seed ? *options.seed : (std::random_device{}() & 0x7fffffffU);
        scratch.emplace();
        campaign_dir = scratch->path();
        campaign::init_campaign_dir(campaign_dir, target, kernel_names, seed);
    }
    auto workspace = campaign::open_workspace(campaign_dir, global.knowledge_dir);
    const auto lock = campaign::CampaignLock::acquire(workspace.dir, "npuopt eval");
    std::string why_missing;
    if (!workspace.toolchain->resolve_bin(&why_missing)) {
        throw Error(ErrorKind::toolchain, fmt::format("eval: {}; nothing was run", why_missing));
    }

    campaign::UserEvalOptions eval_options;
    eval_options.file = options.file;
    eval_options.kernel = options.kernel;
    eval_options.against = options.against;
    if (!global.json) eval_options.on_progress = [](const std::string& line) { std::cerr << line << '\n'; };
    const campaign::UserEvalResult result = campaign::evaluate_user_kernel(workspace, eval_options);
    const int exit_code = exit_code_of(result.verdict);
    if (global.json) {
        nlohmann::json out = campaign::user_eval_json(result);
        out["campaign"] = scratch ? nlohmann::json(nullptr) : nlohmann::json(workspace.dir.string());
        out["scratch_campaign"] = scratch.has_value();
        out["seed"] = workspace.campaign.seed;
        out["exit_code"] = exit_code;
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << fmt::format("campaign  {}\n", scratch ? fmt::format("scratch (seed {}), removed afterwards",
                                                                         workspace.campaign.seed)
                                                           : workspace.dir.string())
                  << campaign::render_user_eval_text(result);
    }
    return exit_code;
}

}  // namespace npuopt::cli
