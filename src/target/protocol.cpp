// Parsing npuopt-jsonl/1 (docs/toolchain-protocol.md): one JSON object with a "type" per line.
// Unknown keys are ignored; unknown types are kept verbatim; anything else malformed is reported
// with the offending line, never dropped. rustc's JSON diagnostics (`"$message_type":"diagnostic"`)
// and cargo's messages (`"reason":"compiler-message"`, `"build-finished"`, `"compiler-artifact"`)
// are understood on the same stream: a vendor toolchain that is a cargo driver passes them on as
// they are (protocol rustc-json/1), and fix-its come in rustc's own shape either way.

#include "target/protocol.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace npuopt::target {

namespace {

using nlohmann::json;

/// A JSON line whose shape is not what the protocol says.
class ShapeError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

const json& require_field(const json& object, const char* key) {
    auto found = object.find(key);
    if (found == object.end()) throw ShapeError(fmt::format("missing key \"{}\"", key));
    return *found;
}

std::string get_string(const json& object, const char* key) {
    const json& value = require_field(object, key);
    if (!value.is_string()) throw ShapeError(fmt::format("\"{}\" must be a string", key));
    return value.get<std::string>();
}

double as_number(const json& value, const std::string& key) {
    if (!value.is_number()) throw ShapeError(fmt::format("\"{}\" must be a number", key));
    return value.get<double>();
}

double get_number(const json& object, const char* key) { return as_number(require_field(object, key), key); }

std::optional<double> get_optional_number(const json& object, const char* key) {
    auto found = object.find(key);
    if (found == object.end() || found->is_null()) return std::nullopt;
    return as_number(*found, key);
}

std::int64_t get_integer(const json& object, const char* key) {
    const json& value = require_field(object, key);
    if (!value.is_number_integer()) throw ShapeError(fmt::format("\"{}\" must be an integer", key));
    return value.get<std::int64_t>();
}

std::int64_t get_optional_integer(const json& object, const char* key) {
    auto found = object.find(key);
    if (found == object.end() || found->is_null()) return 0;
    return get_integer(object, key);
}

bool get_bool(const json& object, const char* key) {
    const json& value = require_field(object, key);
    if (!value.is_boolean()) throw ShapeError(fmt::format("\"{}\" must be true or false", key));
    return value.get<bool>();
}

std::map<std::string, double> get_number_map(const json& object, const char* key) {
    std::map<std::string, double> numbers;
    auto found = object.find(key);
    if (found == object.end() || found->is_null()) return numbers;
    if (!found->is_object()) throw ShapeError(fmt::format("\"{}\" must be an object of numbers", key));
    for (const auto& [name, value] : found->items()) numbers[name] = as_number(value, std::string(key) + "." + name);
    return numbers;
}

/// A string field capped to `max_chars` (see detail::cap_text).
std::string get_capped(const json& object, const char* key, std::size_t max_chars) {
    return detail::cap_text(get_string(object, key), max_chars);
}

Applicability parse_applicability(const std::string& text) {
    if (text == "MachineApplicable") return Applicability::machine_applicable;
    if (text == "MaybeIncorrect") return Applicability::maybe_incorrect;
    if (text == "HasPlaceholders") return Applicability::has_placeholders;
    return Applicability::unspecified;
}

std::string optional_string(const json& object, const char* key) {
    auto found = object.find(key);
    return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

/// The suggestions carried by `holder`'s `spans` (rustc: a child's spans, or the diagnostic's own).
void collect_suggestions(const json& holder, const std::string& help, std::vector<Suggestion>& out) {
    auto spans = holder.find("spans");
    if (spans == holder.end() || spans->is_null()) return;
    if (!spans->is_array()) throw ShapeError("\"spans\" must be an array");
    for (const auto& span : *spans) {
        if (!span.is_object()) throw ShapeError("each span must be an object");
        auto replacement = span.find("suggested_replacement");
        if (replacement == span.end() || replacement->is_null()) continue;
        if (!replacement->is_string()) throw ShapeError("\"suggested_replacement\" must be a string or null");
        if (out.size() == k_diagnostic_suggestions_max) return;
        Suggestion suggestion;
        suggestion.message = detail::cap_text(help, k_diagnostic_note_max_chars);
        suggestion.file = detail::cap_text(get_string(span, "file_name"), k_diagnostic_field_max_chars);
        suggestion.byte_start = get_integer(span, "byte_start");
        suggestion.byte_end = get_integer(span, "byte_end");
        if (suggestion.byte_start < 0 || suggestion.byte_end < suggestion.byte_start) {
            throw ShapeError("a suggestion's byte range must satisfy 0 <= byte_start <= byte_end");
        }
        suggestion.line = static_cast<int>(get_optional_integer(span, "line_start"));
        suggestion.column = static_cast<int>(get_optional_integer(span, "column_start"));
        suggestion.replacement = detail::cap_text(replacement->get<std::string>(), k_diagnostic_message_max_chars);
        suggestion.applicability = parse_applicability(optional_string(span, "suggestion_applicability"));
        out.push_back(std::move(suggestion));
    }
}

/// Suggestions from `children[].spans[]`, each with its child's message as the help.
void collect_child_suggestions(const json& object, Diagnostic& diagnostic, bool children_as_notes) {
    auto children = object.find("children");
    if (children == object.end() || children->is_null()) return;
    if (!children->is_array()) throw ShapeError("\"children\" must be an array");
    for (const auto& child : *children) {
        if (!child.is_object()) throw ShapeError("each child must be an object");
        const std::string help = optional_string(child, "message");
        const std::size_t before = diagnostic.suggestions.size();
        collect_suggestions(child, help, diagnostic.suggestions);
        if (children_as_notes && diagnostic.suggestions.size() == before && !help.empty() &&
            diagnostic.notes.size() < k_diagnostic_notes_max) {
            const std::string level = optional_string(child, "level");
            diagnostic.notes.push_back(
                detail::cap_text(level.empty() ? help : level + ": " + help, k_diagnostic_note_max_chars));
        }
    }
}

/// rustc's JSON diagnostic (`rustc --error-format=json`, or cargo's `message`) as ours: the code's
/// `code`, the primary span, the children as notes, every suggested replacement as a suggestion.
/// Levels other than error and warning (a lone note, "aborting due to …" summaries) give nullopt.
std::optional<Diagnostic> from_rustc_diagnostic(const json& object) {
    Diagnostic diagnostic;
    diagnostic.level = detail::cap_text(get_string(object, "level"), k_diagnostic_field_max_chars);
    if (diagnostic.level.starts_with("error: internal compiler error")) diagnostic.level = "error";
    if (diagnostic.level != "error" && diagnostic.level != "warning") return std::nullopt;
    diagnostic.message = get_capped(object, "message", k_diagnostic_message_max_chars);
    auto code = object.find("code");
    if (code != object.end() && code->is_object()) {
        diagnostic.code = detail::cap_text(optional_string(*code, "code"), k_diagnostic_field_max_chars);
    }
    auto spans = object.find("spans");
    if (spans != object.end() && spans->is_array()) {
        const json* primary = nullptr;
        for (const auto& span : *spans) {
            if (!span.is_object()) throw ShapeError("each span must be an object");
            auto is_primary = span.find("is_primary");
            if (!primary || (is_primary != span.end() && is_primary->is_boolean() && is_primary->get<bool>())) primary = &span;
        }
        if (primary) {
            Span located;
            located.file = detail::cap_text(get_string(*primary, "file_name"), k_diagnostic_field_max_chars);
            located.line = static_cast<int>(get_optional_integer(*primary, "line_start"));
            located.column = static_cast<int>(get_optional_integer(*primary, "column_start"));
            diagnostic.span = located;
        }
    }
    if (diagnostic.code.empty() && !diagnostic.span && diagnostic.message.starts_with("aborting due to")) return std::nullopt;
    collect_suggestions(object, diagnostic.message, diagnostic.suggestions);
    collect_child_suggestions(object, diagnostic, true);
    return diagnostic;
}

Diagnostic to_diagnostic(const json& object) {
    Diagnostic diagnostic;
    diagnostic.level = get_capped(object, "level", k_diagnostic_field_max_chars);
    diagnostic.code = get_capped(object, "code", k_diagnostic_field_max_chars);
    diagnostic.message = get_capped(object, "message", k_diagnostic_message_max_chars);
    auto span = object.find("span");
    if (span != object.end() && !span->is_null()) {
        if (!span->is_object()) throw ShapeError("\"span\" must be an object or null");
        Span located;
        located.file = get_capped(*span, "file", k_diagnostic_field_max_chars);
        located.line = static_cast<int>(get_integer(*span, "line"));
        located.column = static_cast<int>(get_optional_integer(*span, "column"));
        diagnostic.span = located;
    }
    auto quantities = object.find("quantities");
    if (quantities != object.end() && !quantities->is_null()) {
        if (!quantities->is_array()) throw ShapeError("\"quantities\" must be an array");
        for (const auto& item : *quantities) {
            if (!item.is_object()) throw ShapeError("each quantity must be an object");
            if (diagnostic.quantities.size() == k_diagnostic_quantities_max) break;
            diagnostic.quantities.push_back({get_capped(item, "quantity", k_diagnostic_field_max_chars),
                                             get_number(item, "value"), get_optional_number(item, "limit")});
        }
    }
    auto notes = object.find("notes");
    if (notes != object.end() && !notes->is_null()) {
        if (!notes->is_array()) throw ShapeError("\"notes\" must be an array of strings");
        for (const auto& note : *notes) {
            if (!note.is_string()) throw ShapeError("\"notes\" must be an array of strings");
            if (diagnostic.notes.size() == k_diagnostic_notes_max) break;
            diagnostic.notes.push_back(detail::cap_text(note.get<std::string>(), k_diagnostic_note_max_chars));
        }
    }
    collect_child_suggestions(object, diagnostic, false);
    return diagnostic;
}

Verify to_verify(const json& object) {
    Verify verify;
    verify.passed = get_bool(object, "passed");
    verify.max_abs_err = get_optional_number(object, "max_abs_err").value_or(0.0);
    verify.max_rel_err = get_optional_number(object, "max_rel_err").value_or(0.0);
    verify.mismatches = get_optional_integer(object, "mismatches");
    verify.nonfinite = get_optional_integer(object, "nonfinite");
    verify.elements = get_optional_integer(object, "elements");
    auto outputs = object.find("outputs");
    if (outputs != object.end() && !outputs->is_null()) {
        if (!outputs->is_array()) throw ShapeError("\"outputs\" must be an array");
        for (const auto& item : *outputs) {
            if (!item.is_object()) throw ShapeError("each output must be an object");
            OutputInfo output;
            output.name = get_string(item, "name");
            output.elements = get_optional_integer(item, "elements");
            auto fingerprint = item.find("fingerprint");
            if (fingerprint != item.end() && fingerprint->is_string()) output.fingerprint = fingerprint->get<std::string>();
            output.mean_abs = get_optional_number(item, "mean_abs").value_or(0.0);
            output.ref_mean_abs = get_optional_number(item, "ref_mean_abs").value_or(0.0);
            verify.outputs.push_back(output);
        }
    }
    return verify;
}

/// A rustc (`$message_type`) or cargo (`reason`) message: diagnostics, the build's end, artifacts.
void absorb_rustc(const json& object, const std::string& line, detail::ParsedOutput& parsed) {
    parsed.rustc_messages = true;
    if (object.contains("$message_type")) {
        const std::string kind = get_string(object, "$message_type");
        if (kind == "diagnostic") {
            if (auto diagnostic = from_rustc_diagnostic(object)) parsed.diagnostics.push_back(std::move(*diagnostic));
        } else if (kind == "artifact") {
            parsed.cargo_artifact = get_string(object, "artifact");
        } else if (parsed.raw_events.size() < k_raw_events_max) {
            parsed.raw_events.push_back(detail::cap_text(line, k_raw_line_max_chars));
        }
        return;
    }
    const std::string reason = get_string(object, "reason");
    if (reason == "compiler-message") {
        const json& message = require_field(object, "message");
        if (!message.is_object()) throw ShapeError("\"message\" must be an object (a rustc diagnostic)");
        if (auto diagnostic = from_rustc_diagnostic(message)) parsed.diagnostics.push_back(std::move(*diagnostic));
    } else if (reason == "build-finished") {
        parsed.build_finished = get_bool(object, "success");
    } else if (reason == "compiler-artifact") {
        auto executable = object.find("executable");
        if (executable != object.end() && executable->is_string()) {
            parsed.cargo_artifact = executable->get<std::string>();
        } else if (auto files = object.find("filenames"); files != object.end() && files->is_array() && !files->empty() &&
                                                         files->back().is_string()) {
            parsed.cargo_artifact = files->back().get<std::string>();
        }
    } else if (parsed.raw_events.size() < k_raw_events_max) {
        parsed.raw_events.push_back(detail::cap_text(line, k_raw_line_max_chars));
    }
}

/// Adds one parsed line to `parsed`; throws ShapeError when the object is not what its type says.
void absorb(const json& object, const std::string& line, detail::ParsedOutput& parsed) {
    if (!object.contains("type") && (object.contains("$message_type") || object.contains("reason"))) {
        absorb_rustc(object, line, parsed);
        return;
    }
    const std::string type = get_string(object, "type");
    if (type == "diagnostic") {
        parsed.diagnostics.push_back(to_diagnostic(object));
    } else if (type == "version") {
        parsed.version = detail::VersionLine{get_string(object, "name"), get_string(object, "version")};
    } else if (type == "check") {
        detail::CheckLine check;
        check.ok = get_bool(object, "ok");
        check.errors = get_optional_integer(object, "errors");
        check.warnings = get_optional_integer(object, "warnings");
        check.compile_secs = get_optional_number(object, "compile_secs").value_or(0.0);
        parsed.check = check;
    } else if (type == "compile") {
        detail::CompileLine compile;
        compile.ok = get_bool(object, "ok");
        compile.errors = get_optional_integer(object, "errors");
        compile.warnings = get_optional_integer(object, "warnings");
        compile.compile_secs = get_optional_number(object, "compile_secs").value_or(0.0);
        auto artifact = object.find("artifact");
        if (artifact != object.end() && artifact->is_string()) compile.artifact = artifact->get<std::string>();
        auto sha256 = object.find("sha256");
        if (sha256 != object.end() && sha256->is_string()) compile.sha256 = sha256->get<std::string>();
        parsed.compile = compile;
    } else if (type == "paths") {
        detail::PathsLine paths;
        const json& list = require_field(object, "read_only");
        if (!list.is_array()) throw ShapeError("\"read_only\" must be an array of absolute paths");
        for (const auto& item : list) {
            if (!item.is_string() || item.get<std::string>().empty() || item.get<std::string>().front() != '/') {
                throw ShapeError("\"read_only\" must be an array of absolute paths");
            }
            paths.read_only.push_back(item.get<std::string>());
        }
        parsed.paths = paths;
    } else if (type == "schedule") {
        detail::ScheduleLine schedule;
        auto kernel = object.find("kernel");
        if (kernel != object.end() && kernel->is_string()) schedule.kernel = kernel->get<std::string>();
        schedule.cycles = get_number(object, "cycles");
        schedule.breakdown = get_number_map(object, "breakdown");
        schedule.counts = get_number_map(object, "counts");
        parsed.schedule = schedule;
    } else if (type == "run") {
        parsed.run_cycles.push_back(get_number(object, "cycles"));
    } else if (type == "verify") {
        parsed.verify = to_verify(object);
    } else if (type == "error") {
        detail::ErrorLine error{get_capped(object, "kind", k_diagnostic_field_max_chars),
                                get_capped(object, "message", k_diagnostic_message_max_chars), ""};
        auto entry = object.find("entry");
        if (entry != object.end() && entry->is_string()) error.entry = entry->get<std::string>();
        parsed.errors.push_back(error);
    } else if (parsed.raw_events.size() < k_raw_events_max) {
        parsed.raw_events.push_back(detail::cap_text(line, k_raw_line_max_chars));
    }
}

std::string preview(const std::string& line) {
    constexpr std::size_t k_preview_chars = 200;
    return line.size() <= k_preview_chars ? line : line.substr(0, k_preview_chars) + "…";
}

}  // namespace

std::optional<Diagnostic> parse_diagnostic_line(const std::string& line, std::string* error) {
    json object = json::parse(line, nullptr, false);
    if (object.is_discarded() || !object.is_object()) {
        if (error) *error = "not a JSON object";
        return std::nullopt;
    }
    try {
        if (get_string(object, "type") != "diagnostic") throw ShapeError("\"type\" is not \"diagnostic\"");
        return to_diagnostic(object);
    } catch (const std::exception& shape_error) {
        if (error) *error = shape_error.what();
        return std::nullopt;
    }
}

namespace detail {

std::string cap_text(const std::string& text, std::size_t max_chars) {
    if (text.size() <= max_chars) return text;
    const std::size_t marker_chars = fmt::format("… [{} bytes cut]", text.size()).size();  // an upper bound
    std::size_t cut_at = max_chars > marker_chars ? max_chars - marker_chars : 0;
    while (cut_at > 0 && (static_cast<unsigned char>(text[cut_at]) & 0xC0U) == 0x80U) --cut_at;  // UTF-8 continuation
    return text.substr(0, cut_at) + fmt::format("… [{} bytes cut]", text.size() - cut_at);
}

ParsedOutput parse_output(const std::string& stdout_text) {
    ParsedOutput parsed;
    std::size_t begin = 0;
    int line_number = 0;
    while (begin < stdout_text.size()) {
        std::size_t end = stdout_text.find('\n', begin);
        if (end == std::string::npos) end = stdout_text.size();
        std::string line = stdout_text.substr(begin, end - begin);
        begin = end + 1;
        ++line_number;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;

        std::string problem;
        json object = json::parse(line, nullptr, false);
        if (object.is_discarded() || !object.is_object()) {
            problem = "not a JSON object";
        } else {
            try {
                absorb(object, line, parsed);
            } catch (const std::exception& shape_error) {  // ShapeError, or json's own type errors
                problem = fmt::format("wrong shape: {}", shape_error.what());
            }
        }
        if (!problem.empty() && !parsed.bad_line) {
            parsed.bad_line = cap_text(line, k_raw_line_max_chars);
            parsed.parse_error = fmt::format("stdout line {} is not npuopt-jsonl/1 ({}): {}", line_number, problem,
                                             preview(line));
        }
    }
    return parsed;
}

}  // namespace detail

}  // namespace npuopt::target
