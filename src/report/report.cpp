#include "report/report.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "campaign/driver.hpp"
#include "core/error.hpp"
#include "search/tree.hpp"

namespace npuopt::report {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw Error(ErrorKind::io, fmt::format("{}: cannot write", file.string()));
}

std::string html_escape(const std::string& text) {
    std::string out;
    for (char character : text) {
        switch (character) {
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '&': out += "&amp;"; break;
            case '"': out += "&quot;"; break;
            default: out += character;
        }
    }
    return out;
}

std::string cycles_text(const std::optional<double>& cycles) {
    return cycles ? fmt::format("{:.0f}", *cycles) : std::string("-");
}

/// Horizontal bars of each kernel's speedup, with a line at 1x.
std::string speedup_svg(const campaign::CampaignStatus& status) {
    const int row_height = 28;
    const int label_width = 180;
    const int bar_width = 420;
    double max_speedup = 1.0;
    for (const auto& kernel : status.kernels) max_speedup = std::max(max_speedup, kernel.speedup);
    const int height = row_height * static_cast<int>(status.kernels.size() + 1) + 10;
    std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="13">)",
                                  label_width + bar_width + 80, height);
    int row = 0;
    for (const auto& kernel : status.kernels) {
        const int y = 10 + row * row_height;
        const double width = kernel.speedup / max_speedup * bar_width;
        svg += fmt::format(R"(<text x="0" y="{}">{}</text>)", y + 16, html_escape(kernel.kernel));
        svg += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="18" fill="#2e8b57"/>)", label_width, y, width);
        svg += fmt::format(R"(<text x="{:.1f}" y="{}">{:.3f}x</text>)", label_width + width + 6, y + 14, kernel.speedup);
        ++row;
    }
    const double one_x = label_width + 1.0 / max_speedup * bar_width;
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="5" x2="{0:.1f}" y2="{1}" stroke="#444" stroke-dasharray="4"/>)", one_x,
                       height - 5);
    svg += "</svg>";
    return svg;
}

}  // namespace

ReportFiles write_report(store::CampaignStore& store, const fs::path& out_dir) {
    fs::create_directories(out_dir);
    ReportFiles files;
    auto status = campaign::campaign_status(store);
    auto tree_export = search::export_trees(store, out_dir / "trees");
    files.trees = tree_export.files;
    files.svg_note = tree_export.svg_note;

    std::ostringstream markdown;
    markdown << "# npuopt campaign report\n\n"
             << fmt::format("State: {}{}; steps {}; device runs {} of {}; wall {:.0f} s of {:.0f} s.\n\n", status.state,
                            status.stop_reason.empty() ? "" : " (" + status.stop_reason + ")", status.steps,
                            status.device_runs_used, status.device_runs_budget, status.wall_secs_used,
                            status.wall_secs_budget)
             << "| kernel | shape | status | reference | reference cycles | champion cycles | speedup | speed of light | "
                "champion | designs | accepted |\n"
             << "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|\n";
    for (const auto& kernel : status.kernels) {
        markdown << fmt::format("| {} | {} | {} | {} | {} | {} | {:.3f}x | {:.0f}% | `{}` | {} | {} |\n", kernel.kernel,
                                kernel.shape.empty() ? "-" : kernel.shape, kernel.status, kernel.reference,
                                cycles_text(kernel.baseline_cycles), cycles_text(kernel.champion_cycles),
                                kernel.speedup, kernel.sol_fraction * 100.0, kernel.champion, kernel.designs,
                                kernel.accepted);
    }
    markdown << "\nSpeedups are over each kernel's reference: its baseline, or, where the baseline failed, the "
                "first correct design the search found.\n";
    for (const auto& kernel : status.kernels) {  // why a kernel is blocked, failed or exhausted
        if (!kernel.reason.empty()) markdown << fmt::format("\n- **{}** ({}): {}\n", kernel.kernel, kernel.status, kernel.reason);
    }
    markdown << fmt::format("\nGeomean speedup: **{:.3f}x**\n\n## Design trees\n\n", status.geomean_speedup);
    for (const auto& kernel : status.kernels) {
        markdown << fmt::format("### {}\n\n", kernel.kernel);
        if (fs::exists(out_dir / "trees" / (kernel.kernel + ".svg"))) {
            markdown << fmt::format("![{0} design tree](trees/{0}.svg)\n\n", kernel.kernel);
        }
        markdown << "```\n" << search::render_tree_text(store, kernel.kernel) << "```\n\n";
    }
    if (!files.svg_note.empty()) markdown << fmt::format("(No tree pictures: {}.)\n", files.svg_note);
    files.markdown = out_dir / "report.md";
    write_text(files.markdown, markdown.str());

    std::ostringstream html;
    html << "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>npuopt campaign report</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}td,th{padding:4px 10px;"
            "border-bottom:1px solid #ddd}td.n{text-align:right}pre{background:#f6f6f6;padding:8px;overflow:auto}"
            "</style></head><body>\n<h1>npuopt campaign report</h1>\n";
    html << fmt::format("<p>State: {}; steps {}; device runs {} of {}.</p>\n", html_escape(status.state), status.steps,
                        status.device_runs_used, status.device_runs_budget);
    html << "<table><tr><th>kernel</th><th>shape</th><th>status</th><th>reference</th><th>reference cycles</th>"
            "<th>champion cycles</th><th>speedup</th><th>speed of light</th><th>champion</th></tr>\n";
    for (const auto& kernel : status.kernels) {
        html << fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td>"
                            "<td class=n>{:.3f}x</td><td class=n>{:.0f}%</td><td><code>{}</code></td></tr>\n",
                            html_escape(kernel.kernel), html_escape(kernel.shape.empty() ? "-" : kernel.shape),
                            html_escape(kernel.status), html_escape(kernel.reference), cycles_text(kernel.baseline_cycles),
                            cycles_text(kernel.champion_cycles), kernel.speedup, kernel.sol_fraction * 100.0,
                            html_escape(kernel.champion));
    }
    html << "</table>\n";
    for (const auto& kernel : status.kernels) {
        if (!kernel.reason.empty()) {
            html << fmt::format("<p><b>{}</b> ({}): {}</p>\n", html_escape(kernel.kernel), html_escape(kernel.status),
                                html_escape(kernel.reason));
        }
    }
    html << fmt::format("<p>Geomean speedup: <b>{:.3f}x</b></p>\n<h2>Speedups</h2>\n{}\n<h2>Design trees</h2>\n",
                        status.geomean_speedup, speedup_svg(status));
    for (const auto& kernel : status.kernels) {
        html << fmt::format("<h3>{}</h3>\n", html_escape(kernel.kernel));
        if (fs::exists(out_dir / "trees" / (kernel.kernel + ".svg"))) {
            html << fmt::format("<img src=\"trees/{0}.svg\" alt=\"{0} design tree\" style=\"max-width:100%\">\n",
                                html_escape(kernel.kernel));
        }
        html << "<pre>" << html_escape(search::render_tree_text(store, kernel.kernel)) << "</pre>\n";
    }
    html << "</body></html>\n";
    files.html = out_dir / "report.html";
    write_text(files.html, html.str());
    return files;
}

}  // namespace npuopt::report
