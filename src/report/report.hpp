#pragma once
// `npuopt report`: the campaign as Markdown and one self-contained HTML page with inline SVG
// plots (best-so-far champion per kernel against device runs and wall time, fraction of the
// speed-of-light minimum, every race's speedup interval, role shares over the steps), the
// submission's re-verified figures beside the campaign's when there is one, and the design trees
// (Graphviz when `dot` is installed) with each design's parameters in a table.

#include <filesystem>
#include <optional>
#include <vector>

#include "campaign/kb_figures.hpp"
#include "campaign/workspace.hpp"

namespace npuopt::report {

/// What a report wrote.
struct ReportFiles {
    std::filesystem::path markdown;
    std::filesystem::path html;
    std::vector<std::filesystem::path> trees;  ///< exported tree files (JSON, DOT, SVG)
    std::string svg_note;                      ///< why no tree SVG was drawn ("" when it was)
    std::string submission_note;               ///< why no submission was compared ("" when it was)
};

/// Write report.md, report.html and trees/ into `out_dir`, from the campaign database alone and,
/// when `submission_manifest` names an existing file, the submission's manifest.json.
/// `kb`: the knowledge base's figures (campaign::kb_figures); null: the section says they are not available.
ReportFiles write_report(store::CampaignStore& store, const std::filesystem::path& out_dir,
                         const std::optional<std::filesystem::path>& submission_manifest = std::nullopt,
                         const campaign::KbFigures* kb = nullptr);

}  // namespace npuopt::report
