#pragma once
// Legality rules learnt from the toolchain: every diagnostic (from check, schedule or run) and
// every runtime failure (hang, device error) becomes a rule with its evidence. A rule is checked
// by machine against a design's declared quantities before anything is compiled, and renders as
// text for prompts. A rule that rejects a design the toolchain accepts is demoted.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/knowledge_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::knowledge {

/// A design's declared quantities or features, by name (e.g. dm_bytes → 786432).
using Quantities = std::map<std::string, double>;

/// Rule kinds. Bounds and multiples are machine-checked on one quantity; runtime rules on a
/// feature set; statement rules only render as text.
inline constexpr std::string_view k_rule_upper_bound = "upper_bound";  ///< value ≤ limit
inline constexpr std::string_view k_rule_lower_bound = "lower_bound";  ///< value ≥ limit
inline constexpr std::string_view k_rule_multiple_of = "multiple_of";  ///< value % limit == 0
inline constexpr std::string_view k_rule_statement = "statement";
inline constexpr std::string_view k_rule_runtime = "runtime";          ///< features equal → failure

/// The design a diagnostic or a failure came from.
struct DesignRef {
    std::string design_hash;                ///< content hash (designs.content_hash)
    std::filesystem::path source_path;      ///< a file with its source, when there is one
    Quantities quantities;                  ///< declared quantities, when known
};

/// What one diagnostic says, before it is merged into the rule book.
struct RuleDraft {
    std::string code;
    std::string kind;
    std::string statement;   ///< the message with its numbers generalised
    std::string quantity;
    std::optional<double> limit;
    std::string signature;   ///< code|kind|quantity (bounds), code|statement (statements)
};

/// The message with numbers replaced by N ("slice 3" → "slice N"); names are kept.
std::string generalise_message(std::string_view message);

/// The rules a diagnostic states: a multiple-of rule when it carries a modulus quantity
/// (multiple_of, alignment), a bound per quantity it violates with a limit (direction from the
/// message — "at most", "≤", "exceeds" → upper; "at least", "≥", "below" → lower — else from
/// value vs limit), else one statement rule.
std::vector<RuleDraft> draft_rules(const target::Diagnostic& diagnostic);

/// A runtime failure of a design on the device.
struct RuntimeFailure {
    std::string kind;      ///< hang | device | verify
    std::string message;
    Quantities features;   ///< the design features the caller ties it to, e.g. dm_row_pitch_bytes
};

/// A rule a design's quantities violate.
struct Violation {
    std::int64_t rule_id = 0;
    std::string code;
    std::string kind;
    std::string quantity;
    double value = 0.0;
    std::optional<double> limit;
    double confidence = 0.0;
    std::string text;  ///< render_rule()
};

/// Whether `rule` rejects `quantities` (false when it does not apply or is not machine-checkable).
std::optional<Violation> evaluate_rule(const store::KbRuleRecord& rule, const Quantities& quantities);

/// One line for prompts: "E0201 DM allocation exceeds … — dm_bytes ≤ 524288 (npuc 1.0.0; 2 designs; confidence 0.84)".
std::string render_rule(const store::KbRuleRecord& rule);

/// Whether a rule is enforced by check_quantities (status proposed, confirmed or unverified; not stale).
bool is_rule_active(const store::KbRuleRecord& rule);

/// The rule book of one target at one toolchain version.
class RuleBook {
public:
    RuleBook(store::KnowledgeStore& store, std::string target, std::string version);

    /// Merge every diagnostic into the rule book (one transaction); returns the rule ids touched.
    /// `origin`: check | schedule | run.
    std::vector<std::int64_t> mine_diagnostics(const std::vector<target::Diagnostic>& diagnostics,
                                               const DesignRef& design, std::string_view origin = "check");
    /// A runtime failure becomes a runtime rule tied to `failure.features`.
    std::int64_t record_runtime_failure(const RuntimeFailure& failure, const DesignRef& design);
    /// Mine a device run: its diagnostics, and a hang (timed_out) or device error as a runtime rule.
    std::vector<std::int64_t> record_run_result(const target::RunResult& result, const DesignRef& design,
                                                const Quantities& features);

    /// Active rules that reject these quantities (the cheapest check of the cascade).
    std::vector<Violation> check_quantities(const Quantities& quantities);
    /// The toolchain accepted a design: every active rule that would have rejected it is
    /// demoted (status demoted, confidence quartered); returns their ids. Runtime rules are kept
    /// (compiling says nothing about a run). The quantities are also logged for this version, so
    /// that a bound mined later (or one whose limit changes) is checked against every design the
    /// toolchain accepted before it and is born demoted when it rejects one of them.
    std::vector<std::int64_t> record_acceptance(const Quantities& quantities, const DesignRef& design);

    /// Rules of this version (stale ones included when asked).
    std::vector<store::KbRuleRecord> list(bool include_stale = false);
    /// Active rules as prompt text, one per line, most confident first.
    std::string render_text();

    const std::string& version() const { return m_version; }

private:
    struct LoggedAcceptance {
        std::string design_hash;
        Quantities quantities;
    };
    std::vector<LoggedAcceptance> acceptance_log();
    void log_acceptance(const Quantities& quantities, const DesignRef& design);
    /// Demote an active bound that rejects a logged accepted design; true when it did.
    bool demote_if_contradicted(std::int64_t rule_id);
    std::int64_t merge_draft(const RuleDraft& draft, const DesignRef& design, std::string_view origin,
                             const std::string& message, const std::string& quantities_json);

    store::KnowledgeStore* m_store;
    std::string m_target;
    std::string m_version;
};

/// Confidence after `evidence_count` independent designs, for a rule of `kind`.
double rule_confidence(std::string_view kind, std::int64_t evidence_count);

}  // namespace npuopt::knowledge
