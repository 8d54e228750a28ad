#pragma once
// The report's knowledge-base section: the fitted hardware model's parameters (value, 95%
// interval, fit quality, how each was derived) and one plot per fitted model entry — the
// microbenchmark points and the fitted curve through them.

#include <ostream>

#include "campaign/kb_figures.hpp"

namespace npuopt::report {

/// The section as Markdown (a parameter table; the plots as point counts). Null: not available.
void markdown_kb(std::ostream& markdown, const campaign::KbFigures* kb);
/// The section as HTML with inline SVG plots. Null: not available.
void html_kb(std::ostream& html, const campaign::KbFigures* kb);
/// One fitted model entry as an SVG plot (class "kb-fit", data-probe, data-params).
std::string fit_plot_svg(const knowledge::FitPlot& plot);

}  // namespace npuopt::report
