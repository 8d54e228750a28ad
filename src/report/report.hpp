#pragma once
// `npuopt report`: the campaign as Markdown and a simple HTML page with SVG (champion per kernel,
// speedups as bars, the design trees through Graphviz when `dot` is installed).

#include <filesystem>
#include <vector>

#include "campaign/workspace.hpp"

namespace npuopt::report {

/// What a report wrote.
struct ReportFiles {
    std::filesystem::path markdown;
    std::filesystem::path html;
    std::vector<std::filesystem::path> trees;  ///< exported tree files (JSON, DOT, SVG)
    std::string svg_note;                      ///< why no tree SVG was drawn ("" when it was)
};

/// Write report.md, report.html and trees/ into `out_dir`, from the campaign database alone.
ReportFiles write_report(store::CampaignStore& store, const std::filesystem::path& out_dir);

}  // namespace npuopt::report
