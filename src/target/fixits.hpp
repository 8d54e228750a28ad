#pragma once
// Fix-its: the toolchain's machine-applicable suggestions (rustc's `suggested_replacement` with
// applicability MachineApplicable) applied to a source text, and the edits they made. Pure text:
// whether an edit is kept is for the caller to decide by checking the result again.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "target/results.hpp"

namespace npuopt::target {

/// One replacement a fix-it made: the text it replaced and what replaced it.
struct SourceEdit {
    std::string code;      ///< the diagnostic's code, e.g. E0401
    std::string message;   ///< the diagnostic's message
    std::string help;      ///< the suggestion's own message ("use `to_trf`")
    std::string from;      ///< the replaced text ("vtrf")
    std::string to;        ///< the replacement ("to_trf")
    int line = 0;
    int column = 0;
};

/// A source with the fix-its applied.
struct FixedSource {
    std::string source;
    std::vector<SourceEdit> edits;     ///< in source order
    std::vector<std::string> skipped;  ///< suggestions not applied, each with why
};

/// Applies every machine-applicable suggestion of `diagnostics` that points into `file` (the same
/// path, or a path with the same file name: toolchains name the file as they were given it).
/// A suggestion outside the text, not on UTF-8 character boundaries, or overlapping one already
/// taken is skipped with its reason. `edits` is empty when nothing applied.
FixedSource apply_fixits(const std::string& source, const std::filesystem::path& file,
                         const std::vector<Diagnostic>& diagnostics);

/// Whether any diagnostic carries a machine-applicable suggestion.
bool has_machine_applicable(const std::vector<Diagnostic>& diagnostics);

}  // namespace npuopt::target
