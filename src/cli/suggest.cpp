#include "cli/suggest.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "config/campaign_config.hpp"
#include "core/error.hpp"

namespace npuopt::cli {

namespace fs = std::filesystem;

std::size_t edit_distance(std::string_view from, std::string_view to) {
    const std::size_t rows = from.size() + 1, cols = to.size() + 1;
    std::vector<std::size_t> cost(rows * cols);
    auto at = [&](std::size_t row, std::size_t col) -> std::size_t& { return cost[row * cols + col]; };
    for (std::size_t row = 0; row < rows; ++row) at(row, 0) = row;
    for (std::size_t col = 0; col < cols; ++col) at(0, col) = col;
    for (std::size_t row = 1; row < rows; ++row) {
        for (std::size_t col = 1; col < cols; ++col) {
            const std::size_t substitution = from[row - 1] == to[col - 1] ? 0 : 1;
            at(row, col) = std::min({at(row - 1, col) + 1, at(row, col - 1) + 1, at(row - 1, col - 1) + substitution});
            if (row > 1 && col > 1 && from[row - 1] == to[col - 2] && from[row - 2] == to[col - 1]) {
                at(row, col) = std::min(at(row, col), at(row - 2, col - 2) + 1);
            }
        }
    }
    return at(rows - 1, cols - 1);
}

std::optional<std::string> closest_name(std::string_view word, const std::vector<std::string>& candidates) {
    if (std::find(candidates.begin(), candidates.end(), word) != candidates.end()) return std::nullopt;
    const std::size_t limit = word.size() <= 4 ? 1 : word.size() <= 8 ? 2 : 3;
    std::optional<std::string> best;
    std::size_t best_distance = limit + 1;
    for (const auto& candidate : candidates) {
        const std::size_t distance = edit_distance(word, candidate);
        if (distance < best_distance) {
            best_distance = distance;
            best = candidate;
        }
    }
    return best;
}

bool is_campaign_dir(const fs::path& dir) {
    std::error_code ignored;
    return fs::is_regular_file(dir / config::k_campaign_file_name, ignored);
}

std::optional<fs::path> resolve_campaign_dir(std::string_view command, const std::string& positional,
                                             const std::string& flag, bool required) {
    if (!positional.empty() && !flag.empty()) {
        std::error_code ignored;
        if (fs::weakly_canonical(positional, ignored) != fs::weakly_canonical(flag, ignored)) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("{}: two campaign directories, '{}' and --campaign '{}': name one", command,
                                    positional, flag));
        }
    }
    if (!positional.empty()) return fs::path(positional);
    if (!flag.empty()) return fs::path(flag);
    if (is_campaign_dir(fs::current_path())) return fs::current_path();
    if (!required) return std::nullopt;
    throw Error(ErrorKind::invalid_input,
                fmt::format("{}: which campaign? name its directory: `npuopt {} DIR` or `--campaign DIR` (or run it "
                            "inside the campaign directory)",
                            command, command));
}

}  // namespace npuopt::cli
