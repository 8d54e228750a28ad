// Parsing npuopt-jsonl/1 (docs/toolchain-protocol.md): one JSON object with a "type" per line.
// Unknown keys are ignored; unknown types are kept verbatim; anything else malformed is reported
// with the offending line, never dropped.

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

/// Adds one parsed line to `parsed`; throws ShapeError when the object is not what its type says.
void absorb(const json& object, const std::string& line, detail::ParsedOutput& parsed) {
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
