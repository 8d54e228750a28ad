#include "campaign/records_format.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace npuopt::campaign {
namespace {

using nlohmann::json;

json optional_json(const std::optional<std::string>& value) { return value ? json(*value) : json(); }
json optional_json(const std::optional<std::int64_t>& value) { return value ? json(*value) : json(); }
json optional_json(const std::optional<double>& value) { return value ? json(*value) : json(); }
json toolchain_json(const std::optional<ToolchainId>& toolchain) {
    return toolchain ? json{{"name", toolchain->name}, {"version", toolchain->version}} : json();
}

/// Reads the fields of one JSON object; every error names the place ("FILE:LINE: RECORD") and the field.
class FieldReader {
public:
    FieldReader(const json& object, std::string where) : m_object(&object), m_where(std::move(where)) {
        if (!object.is_object()) throw Error(ErrorKind::invalid_input, fmt::format("{}: not a JSON object", m_where));
    }
    const std::string& where() const { return m_where; }

    [[noreturn]] void fail(std::string_view name, const std::string& problem) const {
        throw Error(ErrorKind::invalid_input, fmt::format("{}: field '{}' {}", m_where, name, problem));
    }
    /// The field, or null when it is missing and `required` is false.
    const json* find(std::string_view name, bool required) const {
        auto found = m_object->find(name);
        if (found == m_object->end()) {
            if (required) fail(name, "is missing");
            return nullptr;
        }
        return &*found;
    }
    const json& get(std::string_view name, bool (json::*is_kind)() const noexcept, std::string_view kind) const {
        const json& value = *find(name, true);
        if (!(value.*is_kind)()) fail(name, fmt::format("must be {}, not {}", kind, value.type_name()));
        return value;
    }
    /// The field when present and not null (checked to be of `kind`).
    const json* get_optional(std::string_view name, bool (json::*is_kind)() const noexcept, std::string_view kind) const {
        const json* value = find(name, false);
        if (value == nullptr || value->is_null()) return nullptr;
        if (!(value->*is_kind)()) fail(name, fmt::format("must be {} or null, not {}", kind, value->type_name()));
        return value;
    }
    std::string text(std::string_view name) const { return get(name, &json::is_string, "a string").get<std::string>(); }
    std::optional<std::string> optional_text(std::string_view name) const {
        const json* value = get_optional(name, &json::is_string, "a string");
        return value ? std::optional<std::string>(value->get<std::string>()) : std::nullopt;
    }
    std::int64_t integer(std::string_view name) const {
        return get(name, &json::is_number_integer, "an integer").get<std::int64_t>();
    }
    std::optional<std::int64_t> optional_integer(std::string_view name) const {
        const json* value = get_optional(name, &json::is_number_integer, "an integer");
        return value ? std::optional<std::int64_t>(value->get<std::int64_t>()) : std::nullopt;
    }
    double real(std::string_view name) const { return get(name, &json::is_number, "a number").get<double>(); }
    std::optional<double> optional_real(std::string_view name) const {
        const json* value = get_optional(name, &json::is_number, "a number");
        return value ? std::optional<double>(value->get<double>()) : std::nullopt;
    }
    bool flag(std::string_view name) const { return get(name, &json::is_boolean, "true or false").get<bool>(); }
    /// A content hash: 64 lowercase hex digits.
    std::string hash(std::string_view name) const {
        std::string value = text(name);
        if (value.size() != 64 || value.find_first_not_of("0123456789abcdef") != std::string::npos) {
            fail(name, fmt::format("must be a content hash (64 lowercase hex digits), not '{}'", value));
        }
        return value;
    }
    std::optional<ToolchainId> toolchain(std::string_view name) const {
        const json* value = get_optional(name, &json::is_object, "an object {name, version}");
        if (value == nullptr) return std::nullopt;
        FieldReader inner(*value, fmt::format("{}: {}", m_where, name));
        return ToolchainId{inner.text("name"), inner.text("version")};
    }

private:
    const json* m_object;
    std::string m_where;
};

RecordsHeader parse_header(const FieldReader& read) {
    RecordsHeader header;
    const std::string format = read.text("format");
    if (format != k_records_format) {
        read.fail("format", fmt::format("is '{}', expected '{}' (not a file of `npuopt export`)", format, k_records_format));
    }
    const std::int64_t version = read.integer("version");
    if (version != k_records_format_version) {
        read.fail("version", fmt::format("is {}; this npuopt reads version {} of {}", version, k_records_format_version,
                                         k_records_format));
    }
    header.version = static_cast<int>(version);
    header.target = read.text("target");
    if (header.target.empty()) read.fail("target", "is empty");
    header.toolchain = read.toolchain("toolchain");
    for (const json& item : read.get("toolchain_versions", &json::is_array, "an array")) {
        FieldReader inner(item, read.where() + ": toolchain_versions[]");
        header.toolchain_versions.push_back({inner.text("name"), inner.text("version")});
    }
    for (const auto& [kernel, hash] : read.get("bench_config", &json::is_object, "an object").items()) {
        if (!hash.is_string()) read.fail("bench_config", fmt::format("must map kernel names to strings ('{}')", kernel));
        header.bench_config[kernel] = hash.get<std::string>();
    }
    FieldReader campaign(read.get("campaign", &json::is_object, "an object"), read.where() + ": campaign");
    header.campaign_name = campaign.text("name");
    header.campaign_fingerprint = campaign.text("fingerprint");
    header.campaign_seed = static_cast<std::uint64_t>(campaign.integer("seed"));
    header.kernel = read.optional_text("kernel").value_or("");
    header.exported_at = read.text("exported_at");
    header.npuopt_version = read.text("npuopt_version");
    return header;
}

TreeOrigin parse_tree(const FieldReader& read) {
    TreeOrigin tree;
    tree.role = read.text("role");
    tree.move = read.text("move");
    tree.reason = read.text("reason");
    tree.verdict = read.text("verdict");
    tree.last_stage = read.text("last_stage");
    tree.final_reason = read.text("final_reason");
    tree.step = read.integer("step");
    tree.cycles = read.optional_real("cycles");
    tree.speedup = read.optional_real("speedup");
    return tree;
}

DesignLine parse_design(const FieldReader& read) {
    DesignLine design;
    design.hash = read.hash("hash");
    design.kernel = read.text("kernel");
    if (design.kernel.empty()) read.fail("kernel", "is empty");
    design.shape = read.text("shape");
    design.family = read.text("family");
    if (design.family.empty()) read.fail("family", "is empty");
    design.params = read.get("params", &json::is_object, "an object");
    design.source = read.optional_text("source");
    if (read.optional_text("parent")) design.parent = read.hash("parent");
    if (const json* tree = read.get_optional("tree", &json::is_object, "an object")) {
        design.tree = parse_tree(FieldReader(*tree, read.where() + ": tree"));
    }
    return design;
}

/// A measurement as the store would accept it (campaign_store's rules, named by line and field).
store::MeasurementRecord parse_measurement(const FieldReader& read) {
    store::MeasurementRecord measurement;
    measurement.launch_order = read.integer("launch_order");
    measurement.seed = read.integer("seed");
    measurement.repeat_idx = read.integer("repeat_idx");
    measurement.cycles = read.optional_real("cycles");
    measurement.wall_ms = read.optional_real("wall_ms");
    measurement.side = read.text("side");
    if (measurement.side != "candidate" && measurement.side != "champion") {
        read.fail("side", fmt::format("is '{}', expected candidate or champion", measurement.side));
    }
    measurement.outcome = read.text("outcome");
    measurement.error = read.optional_text("error");
    if (measurement.outcome == "ok") {
        if (!measurement.cycles) read.fail("cycles", "is missing: an ok launch has cycles");
        if (measurement.error) read.fail("error", "must be null for an ok launch");
    } else if (measurement.outcome == "transient" || measurement.outcome == "failed") {
        if (!measurement.error || measurement.error->empty()) {
            read.fail("error", fmt::format("is missing: a {} launch says why", measurement.outcome));
        }
    } else {
        read.fail("outcome", fmt::format("is '{}', expected ok, transient or failed", measurement.outcome));
    }
    measurement.attempt = read.integer("attempt");
    measurement.pair_idx = read.optional_integer("pair_idx");
    return measurement;
}

EvaluationLine parse_evaluation(const FieldReader& read) {
    EvaluationLine evaluation;
    evaluation.fingerprint = read.hash("fingerprint");
    evaluation.design = read.hash("design");
    evaluation.stage = read.text("stage");
    evaluation.verdict = read.text("verdict");
    if (evaluation.stage.empty()) read.fail("stage", "is empty");
    if (evaluation.verdict.empty()) read.fail("verdict", "is empty");
    evaluation.reason = read.text("reason");
    evaluation.secs = read.real("secs");
    evaluation.toolchain = read.toolchain("toolchain");
    evaluation.bench_config = read.text("bench_config");
    evaluation.stale = read.flag("stale");
    evaluation.created_at = read.text("created_at");
    evaluation.launches = read.optional_integer("launches");
    evaluation.failed_launches = read.optional_integer("failed_launches");
    evaluation.retries = read.optional_integer("retries");
    std::size_t measurement_idx = 0;
    for (const json& item : read.get("measurements", &json::is_array, "an array")) {
        FieldReader inner(item, fmt::format("{}: measurements[{}]", read.where(), measurement_idx++));
        evaluation.measurements.push_back(parse_measurement(inner));
    }
    return evaluation;
}

json measurement_json(const store::MeasurementRecord& measurement) {
    return {{"launch_order", measurement.launch_order}, {"seed", measurement.seed},
            {"repeat_idx", measurement.repeat_idx},     {"cycles", optional_json(measurement.cycles)},
            {"wall_ms", optional_json(measurement.wall_ms)}, {"side", measurement.side},
            {"outcome", measurement.outcome},           {"error", optional_json(measurement.error)},
            {"attempt", measurement.attempt},           {"pair_idx", optional_json(measurement.pair_idx)}};
}

}  // namespace

json to_json(const RecordsHeader& header) {
    json versions = json::array();
    for (const ToolchainId& version : header.toolchain_versions) versions.push_back(toolchain_json(version));
    return {{"record", "header"},
            {"format", k_records_format},
            {"version", header.version},
            {"target", header.target},
            {"toolchain", toolchain_json(header.toolchain)},
            {"toolchain_versions", versions},
            {"bench_config", header.bench_config},
            {"campaign",
             {{"name", header.campaign_name}, {"fingerprint", header.campaign_fingerprint}, {"seed", header.campaign_seed}}},
            {"kernel", header.kernel.empty() ? json() : json(header.kernel)},
            {"exported_at", header.exported_at},
            {"npuopt_version", header.npuopt_version}};
}

json to_json(const DesignLine& design) {
    json tree;
    if (design.tree) {
        const TreeOrigin& origin = *design.tree;
        tree = {{"role", origin.role},     {"move", origin.move},
                {"reason", origin.reason}, {"verdict", origin.verdict},
                {"last_stage", origin.last_stage}, {"final_reason", origin.final_reason},
                {"step", origin.step},     {"cycles", optional_json(origin.cycles)},
                {"speedup", optional_json(origin.speedup)}};
    }
    return {{"record", "design"},   {"hash", design.hash},   {"kernel", design.kernel},
            {"shape", design.shape}, {"family", design.family}, {"params", design.params},
            {"source", optional_json(design.source)}, {"parent", optional_json(design.parent)}, {"tree", tree}};
}

json to_json(const EvaluationLine& evaluation) {
    json measurements = json::array();
    for (const auto& measurement : evaluation.measurements) measurements.push_back(measurement_json(measurement));
    return {{"record", "evaluation"},
            {"fingerprint", evaluation.fingerprint},
            {"design", evaluation.design},
            {"stage", evaluation.stage},
            {"verdict", evaluation.verdict},
            {"reason", evaluation.reason},
            {"secs", evaluation.secs},
            {"toolchain", toolchain_json(evaluation.toolchain)},
            {"bench_config", evaluation.bench_config},
            {"stale", evaluation.stale},
            {"created_at", evaluation.created_at},
            {"launches", optional_json(evaluation.launches)},
            {"failed_launches", optional_json(evaluation.failed_launches)},
            {"retries", optional_json(evaluation.retries)},
            {"measurements", measurements}};
}

std::string evaluation_fingerprint(const EvaluationLine& evaluation) {
    json identity = to_json(evaluation);
    identity.erase("fingerprint");
    identity.erase("stale");
    return content_hash(identity.dump());
}

RecordsLine parse_records_line(std::string_view text, const std::string& file, std::int64_t line_number) {
    const std::string place = fmt::format("{}:{}", file, line_number);
    json object;
    try {
        object = json::parse(text);
    } catch (const json::parse_error& error) {
        throw Error(ErrorKind::invalid_input, fmt::format("{}: not valid JSON ({})", place, error.what()));
    }
    if (!object.is_object()) {
        throw Error(ErrorKind::invalid_input, fmt::format("{}: not a JSON object but {}", place, object.type_name()));
    }
    const FieldReader line(object, place);
    const std::string kind = line.text("record");
    const FieldReader read(object, fmt::format("{}: {}", place, kind));
    if (kind == "header") return parse_header(read);
    if (kind == "design") {
        DesignLine design = parse_design(read);
        design.line = line_number;
        return design;
    }
    if (kind == "evaluation") {
        EvaluationLine evaluation = parse_evaluation(read);
        evaluation.line = line_number;
        return evaluation;
    }
    line.fail("record", fmt::format("is '{}', expected header, design or evaluation", kind));
}

}  // namespace npuopt::campaign
