// Applying machine-applicable suggestions (fixits.hpp): collect, order, drop overlaps, splice
// from the end of the text so that earlier byte offsets stay valid.

#include "target/fixits.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace npuopt::target {

namespace {

struct Pending {
    const Diagnostic* diagnostic;
    const Suggestion* suggestion;
};

bool same_file(const std::string& named, const std::filesystem::path& file) {
    if (named.empty()) return true;
    const std::filesystem::path path(named);
    return path == file || path.filename() == file.filename();
}

bool on_char_boundary(const std::string& text, std::int64_t offset) {
    if (offset <= 0 || offset >= static_cast<std::int64_t>(text.size())) return true;
    return (static_cast<unsigned char>(text[static_cast<std::size_t>(offset)]) & 0xC0U) != 0x80U;
}

}  // namespace

bool has_machine_applicable(const std::vector<Diagnostic>& diagnostics) {
    return std::any_of(diagnostics.begin(), diagnostics.end(), [](const Diagnostic& diagnostic) {
        return std::any_of(diagnostic.suggestions.begin(), diagnostic.suggestions.end(), [](const Suggestion& s) {
            return s.applicability == Applicability::machine_applicable;
        });
    });
}

FixedSource apply_fixits(const std::string& source, const std::filesystem::path& file,
                         const std::vector<Diagnostic>& diagnostics) {
    FixedSource fixed;
    fixed.source = source;
    std::vector<Pending> pending;
    for (const auto& diagnostic : diagnostics) {
        for (const auto& suggestion : diagnostic.suggestions) {
            if (suggestion.applicability != Applicability::machine_applicable) continue;
            const auto size = static_cast<std::int64_t>(source.size());
            std::string why;
            if (!same_file(suggestion.file, file)) {
                why = fmt::format("it is for another file ({})", suggestion.file);
            } else if (suggestion.byte_end > size) {
                why = fmt::format("its bytes {}..{} are outside the {}-byte source", suggestion.byte_start,
                                  suggestion.byte_end, size);
            } else if (!on_char_boundary(source, suggestion.byte_start) || !on_char_boundary(source, suggestion.byte_end)) {
                why = "its range splits a UTF-8 character";
            }
            if (!why.empty()) {
                fixed.skipped.push_back(fmt::format("{} at {}:{}: {}", diagnostic.code, suggestion.line, suggestion.column, why));
                continue;
            }
            pending.push_back({&diagnostic, &suggestion});
        }
    }
    std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
        return a.suggestion->byte_start < b.suggestion->byte_start;
    });
    std::vector<Pending> taken;
    std::int64_t taken_end = -1;
    for (const auto& item : pending) {
        const Suggestion& s = *item.suggestion;
        const bool duplicate = !taken.empty() && taken.back().suggestion->byte_start == s.byte_start &&
                               taken.back().suggestion->byte_end == s.byte_end &&
                               taken.back().suggestion->replacement == s.replacement;
        if (duplicate) continue;
        if (s.byte_start < taken_end) {
            fixed.skipped.push_back(fmt::format("{} at {}:{}: it overlaps an earlier suggestion", item.diagnostic->code,
                                                s.line, s.column));
            continue;
        }
        taken.push_back(item);
        taken_end = std::max(taken_end, s.byte_end);
    }
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
        const Suggestion& s = *it->suggestion;
        const auto start = static_cast<std::size_t>(s.byte_start);
        const auto length = static_cast<std::size_t>(s.byte_end - s.byte_start);
        fixed.source.replace(start, length, s.replacement);
    }
    for (const auto& item : taken) {
        const Suggestion& s = *item.suggestion;
        SourceEdit edit;
        edit.code = item.diagnostic->code;
        edit.message = item.diagnostic->message;
        edit.help = s.message;
        edit.from = source.substr(static_cast<std::size_t>(s.byte_start), static_cast<std::size_t>(s.byte_end - s.byte_start));
        edit.to = s.replacement;
        edit.line = s.line;
        edit.column = s.column;
        fixed.edits.push_back(std::move(edit));
    }
    return fixed;
}

}  // namespace npuopt::target
