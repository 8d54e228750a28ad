// `npuopt submit DIR [--out SUBMISSION_DIR]` and `npuopt report DIR [--out DIR]`.

#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "config/campaign_config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "report/report.hpp"
#include "campaign/kb_figures.hpp"
#include "campaign/submission.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::cli {

namespace fs = std::filesystem;

int run_submit(const GlobalOptions& global, const SubmitCliOptions& options) {
    if (options.runs < 1) throw Error(ErrorKind::invalid_input, "submit: --runs must be at least 1");
    auto workspace = campaign::open_workspace(options.dir, global.knowledge_dir);
    campaign::SubmitOptions submit_options;
    submit_options.out_dir = options.out.value_or(workspace.dir / "submission");
    std::error_code error_code;
    if (fs::exists(submit_options.out_dir, error_code) && !fs::is_empty(submit_options.out_dir, error_code)) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("submit: {} exists and is not empty (a submission from before?); nothing was "
                                "changed: name a new directory with `--out DIR`, or move that one away",
                                submit_options.out_dir.string()));
    }
    submit_options.runs = options.runs;
    if (!global.json) submit_options.on_progress = [](const std::string& line) { std::cerr << line << '\n'; };
    auto submission = campaign::build_submission(workspace, submit_options);
    if (global.json) {
        nlohmann::json out = submission.manifest;
        out["dir"] = submission.dir.string();
        out["tarball"] = submission.tarball.string();
        std::cout << out.dump(2) << '\n';
    } else {
        std::cout << campaign::render_results_table(submission.kernels)
                  << fmt::format("submission: {}\ntarball:    {}\n", submission.dir.string(), submission.tarball.string());
    }
    return k_exit_ok;
}

int run_report(const GlobalOptions& global, const ReportOptions& options) {
    fs::path db_file = options.dir / config::k_campaign_db_name;
    if (!fs::is_regular_file(db_file)) {
        throw Error(ErrorKind::invalid_input, fmt::format("{} is not a campaign directory (no {})", options.dir.string(),
                                                          config::k_campaign_db_name));
    }
    store::Database::Options open_options;
    open_options.create = false;
    auto store = store::CampaignStore::open(db_file, open_options);
    std::optional<campaign::KbFigures> kb;
    try {  // the fits need the target's suite: from the campaign's workspace (nothing is run)
        auto workspace = campaign::open_workspace(options.dir, global.knowledge_dir);
        kb = campaign::kb_figures(workspace);
    } catch (const Error& error) {
        log::warn("report: no knowledge-base figures: {}", error.what());
    }
    auto files = report::write_report(store, options.out.value_or(options.dir / "report"),
                                      options.dir / "submission" / "manifest.json", kb ? &*kb : nullptr);
    if (global.json) {
        nlohmann::json trees = nlohmann::json::array();
        for (const auto& file : files.trees) trees.push_back(file.string());
        std::cout << nlohmann::json{{"markdown", files.markdown.string()},
                                    {"html", files.html.string()},
                                    {"trees", trees},
                                    {"svg_note", files.svg_note},
                                    {"submission_note", files.submission_note}}
                         .dump(2)
                  << '\n';
    } else {
        std::cout << fmt::format("wrote {}\nwrote {}\n", files.markdown.string(), files.html.string());
        if (!files.svg_note.empty()) std::cout << "no tree pictures: " << files.svg_note << '\n';
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli
