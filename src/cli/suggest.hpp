#pragma once
// Command-line conveniences in git's and cargo's manner: "did you mean" for a mistyped name, and
// the campaign directory named the same way on every subcommand.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace npuopt::cli {

/// Edit distance between two words: insertions, deletions, substitutions and swaps of two
/// neighbouring characters each count 1 (optimal string alignment).
std::size_t edit_distance(std::string_view from, std::string_view to);

/// The candidate `word` is most likely a typo of: the nearest by edit distance when that is at
/// most 1 for words of up to 4 characters, 2 up to 8, else 3 (cargo's and git's scale); nullopt
/// when none is that near, or when `word` is itself a candidate.
std::optional<std::string> closest_name(std::string_view word, const std::vector<std::string>& candidates);

/// True when `dir` holds a campaign.yaml (what `npuopt init` makes).
bool is_campaign_dir(const std::filesystem::path& dir);

/// The campaign directory of `command`, named positionally and/or with --campaign (empty when
/// not given): both must name the same directory; neither: the current directory when it is a
/// campaign (as git finds its repository), else Error(invalid_input) saying how to name it when
/// `required`, else nullopt.
std::optional<std::filesystem::path> resolve_campaign_dir(std::string_view command, const std::string& positional,
                                                          const std::string& flag, bool required);

}  // namespace npuopt::cli
