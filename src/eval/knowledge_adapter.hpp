#pragma once
// The statistics of eval/ in the shape knowledge/ asks for (knowledge sits below eval, so it
// takes them as a `knowledge::Statistics` of plain functions).

#include "knowledge/microbench.hpp"

namespace npuopt::eval {

/// median, mad and fit_linear of eval/stats.hpp as a knowledge::Statistics.
knowledge::Statistics knowledge_statistics();

}  // namespace npuopt::eval
