#pragma once
// A role's edit of a kernel source: a unified diff applied by GNU patch (from Debian), run as a
// sandboxed subprocess on a scratch copy — the diff is untrusted text from an LLM — or a whole
// new file. Nothing here runs the toolchain.

#include <optional>
#include <string>

namespace npuopt::search {

struct EditResult {
    std::optional<std::string> source;  ///< the edited source; none when the edit did not apply
    std::string error;                  ///< why not, in words (patch's own message included)
};

/// Whether `text` looks like a unified diff (a "@@ -" hunk header after "---"/"+++" lines, or hunks alone).
bool looks_like_unified_diff(const std::string& text);

/// Apply `diff` to `original` with `patch --batch --forward` (fuzz as patch allows it). The file
/// names in the diff are ignored: it applies to `original`.
EditResult apply_unified_diff(const std::string& original, const std::string& diff);

}  // namespace npuopt::search
