#pragma once
// Rule sweeps: compile many designs with the toolchain, mine every diagnostic into the rule book
// in sweep order (an accepted design demotes the rules that reject it, as in the cascade), then
// audit the rule book against every accepted design's declared quantities: precision (the rules
// that never reject a design the toolchain accepts) and which diagnostic codes have a rule.
// Generic: the designs (templates, probes, fixtures) come from the caller.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "knowledge/rules.hpp"
#include "target/toolchain.hpp"

namespace npuopt::knowledge {

/// One design of a sweep: a source file to check and what the design declares about itself.
struct SweepDesign {
    std::string label;                 ///< e.g. "qkv_streamed{ROWS=64}"
    std::string group;                 ///< e.g. template | probe | fixture | microbench
    std::filesystem::path file;        ///< the source the toolchain checks
    std::string design_hash;           ///< content hash (evidence identity)
    Quantities declared;               ///< declared quantities and features; empty when none
};

/// How the toolchain answered one design, and what the rule book learnt from it.
struct SweepResult {
    std::string label;
    std::string group;
    bool accepted = false;             ///< check ok
    bool error = false;                ///< no verdict (timed out, crashed, unparsable)
    std::string status;                ///< call status name
    std::vector<std::string> codes;    ///< diagnostic codes, errors and warnings, in order
    std::vector<std::int64_t> rule_ids;  ///< rules learnt or reinforced
    std::vector<std::int64_t> demoted;   ///< rules its acceptance demoted
    double secs = 0.0;
};

/// One rule, audited against the accepted designs.
struct RuleAuditRow {
    store::KbRuleRecord rule;
    bool active = false;               ///< enforced (is_rule_active)
    bool checkable = false;            ///< machine-checked kind (bound, multiple, runtime)
    bool exercised = false;            ///< some accepted design declares a quantity it reads
    std::vector<std::string> rejects;  ///< accepted designs it rejects (its status ignored)
};

/// Precision and coverage of a rule book against a set of accepted designs.
struct RuleAudit {
    std::vector<RuleAuditRow> rows;
    int rules = 0;                     ///< all rules of the book
    int active = 0;                    ///< enforced at the end
    int active_checkable = 0;
    int active_exercised = 0;          ///< enforced, machine-checked and exercised
    int active_imprecise = 0;          ///< enforced rules that reject an accepted design
    int mined_checkable = 0;           ///< machine-checked rules, whatever their status
    int mined_imprecise = 0;           ///< of those, rejecting an accepted design (status ignored)
    int demoted = 0;
    double precision = 1.0;            ///< (active − active_imprecise) / active; 1 when none
    std::set<std::string> codes;             ///< codes with a rule (any status)
    std::set<std::string> codes_active;      ///< codes with an enforced rule
    std::set<std::string> codes_checkable;   ///< codes with an enforced machine-checked rule
};

/// An accepted design: label and declared quantities.
struct AcceptedDesign {
    std::string label;
    Quantities quantities;
};

/// Audit `rules` against `accepted`. A rule is imprecise when evaluate_rule rejects an accepted
/// design's quantities (checked regardless of status for `mined_imprecise`).
RuleAudit audit_rules(const std::vector<store::KbRuleRecord>& rules, const std::vector<AcceptedDesign>& accepted);

struct RuleSweepOptions {
    int parallel = 2;                  ///< concurrent checks
    int transient_retries = 2;
    std::function<void(const SweepResult&)> on_result;  ///< progress, in sweep order
};

struct RuleSweepReport {
    std::string toolchain_version;
    std::vector<SweepResult> results;  ///< in sweep order
    std::vector<AcceptedDesign> accepted;
    RuleAudit audit;
    double wall_secs = 0.0;
};

/// Check every design with `toolchain` (in parallel), then, in sweep order, mine each design's
/// diagnostics into `rules` and record each accepted design (RuleBook::record_acceptance), and
/// audit the final rule book against every accepted design.
RuleSweepReport run_rule_sweep(const target::Toolchain& toolchain, RuleBook& rules,
                               const std::vector<SweepDesign>& designs, const RuleSweepOptions& options = {});

}  // namespace npuopt::knowledge
