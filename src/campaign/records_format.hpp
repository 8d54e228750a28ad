#pragma once
// The portable records file of `npuopt export` / `npuopt import`: JSON Lines, one object a line,
// each naming what it is in "record".
//
//   line 1  header      format "npuopt-records", version, target, the toolchain the campaign runs
//                       and every version it saw, the bench-config hash of each kernel, the
//                       campaign's name, fingerprint and seed, the kernel exported (null: all)
//   then    design      content hash, kernel, shape, family, params, source, parent's hash, and
//                       how it entered its tree there (role, move, verdict, cycles …)
//           evaluation  one cascade step of a design listed before it: stage, verdict, the
//                       toolchain and bench config it ran under, its measurements (seeds, cycles
//                       samples, outcomes) and a fingerprint that identifies it wherever it goes
//
// parse_records_line() checks every field and throws Error(invalid_input) naming the file, the
// line, the record and the field.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/campaign_store.hpp"

namespace npuopt::campaign {

inline constexpr std::string_view k_records_format = "npuopt-records";
inline constexpr int k_records_format_version = 1;

/// A toolchain release as records name it (toolchain_versions: name, version).
struct ToolchainId {
    std::string name;     ///< e.g. npuc
    std::string version;  ///< e.g. 1.0.0
    std::string text() const { return name + " " + version; }
    bool operator==(const ToolchainId&) const = default;
};

/// Line 1: where the records come from.
struct RecordsHeader {
    int version = k_records_format_version;
    std::string target;
    std::optional<ToolchainId> toolchain;             ///< what the campaign ran when exported (none: unknown)
    std::vector<ToolchainId> toolchain_versions;      ///< every version the campaign saw
    std::map<std::string, std::string> bench_config;  ///< kernel → bench-config hash (as configured)
    std::string campaign_name;
    std::string campaign_fingerprint;
    std::uint64_t campaign_seed = 0;
    std::string kernel;                               ///< the one kernel exported ("" = every kernel)
    std::string exported_at;
    std::string npuopt_version;
};

/// How a design entered its kernel's tree in the exporting campaign.
struct TreeOrigin {
    std::string role;
    std::string move;
    std::string reason;
    std::string verdict;
    std::string last_stage;
    std::string final_reason;
    std::int64_t step = 0;
    std::optional<double> cycles;
    std::optional<double> speedup;
};

/// A design line.
struct DesignLine {
    std::int64_t line = 0;       ///< where it was read (not written)
    std::string hash;            ///< content hash (SHA-256 of target, kernel, shape, source)
    std::string kernel;
    std::string shape;           ///< canonical "k=v,k=v"
    std::string family;          ///< template name (or the origin of a written design)
    nlohmann::json params = nlohmann::json::object();
    std::optional<std::string> source;  ///< none when neither the store nor designs/ had it
    std::optional<std::string> parent;  ///< the parent design's hash
    std::optional<TreeOrigin> tree;     ///< none for a design that has no tree edge
};

/// An evaluation line: one cascade step and its measurements.
struct EvaluationLine {
    std::int64_t line = 0;       ///< where it was read (not written)
    std::string fingerprint;     ///< evaluation_fingerprint() where it was first measured
    std::string design;          ///< the design's content hash
    std::string stage;
    std::string verdict;
    std::string reason;
    double secs = 0.0;
    std::optional<ToolchainId> toolchain;  ///< none for a step that did not call the toolchain
    std::string bench_config;
    bool stale = false;
    std::string created_at;
    std::optional<std::int64_t> launches;
    std::optional<std::int64_t> failed_launches;
    std::optional<std::int64_t> retries;
    std::vector<store::MeasurementRecord> measurements;  ///< ids and evaluation_id unused
};

using RecordsLine = std::variant<RecordsHeader, DesignLine, EvaluationLine>;

nlohmann::json to_json(const RecordsHeader& header);
nlohmann::json to_json(const DesignLine& design);
nlohmann::json to_json(const EvaluationLine& evaluation);

/// What identifies an evaluation across campaigns: SHA-256 of its line without the fingerprint
/// and the stale flag (which the destination decides).
std::string evaluation_fingerprint(const EvaluationLine& evaluation);

/// Parse and check one line (`line_number` counts from 1). Error(invalid_input)
/// "FILE:LINE: RECORD: field 'NAME' …" for bad JSON, a missing or mistyped field, an unknown
/// record, a wrong format or version, or a measurement the store would refuse.
RecordsLine parse_records_line(std::string_view text, const std::string& file, std::int64_t line_number);

}  // namespace npuopt::campaign
