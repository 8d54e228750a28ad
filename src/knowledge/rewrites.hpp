#pragma once
// Source rewrites and known failures: what a toolchain update teaches about sources as a whole.
//
// A *rewrite* is a fix-it the toolchain suggested (machine-applicable), applied to a failing
// design and kept because the design then passed the check again: "since npuc 1.1.0: `vtrf` →
// `to_trf`". It is a rule of kind `rewrite` in the rule book, with the designs it fixed as
// evidence, and from then on it is applied to every template and design source before compiling,
// on this toolchain version and every later one.
//
// A *known failure* is a design-level failure that does not depend on the parameters: the same
// code and message from two different designs of one family under one toolchain version. The
// search stops proposing that family until a design of it passes the check again.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/rules.hpp"
#include "store/knowledge_store.hpp"
#include "target/fixits.hpp"

namespace npuopt::knowledge {

inline constexpr std::string_view k_rule_rewrite = "rewrite";              ///< features: from, to
inline constexpr std::string_view k_rule_known_failure = "known_failure";  ///< features: family

/// A rewrite rule, as the sources use it.
struct SourceRewrite {
    std::int64_t rule_id = 0;
    std::string code;        ///< the diagnostic that suggested it
    std::string from;
    std::string to;
    std::string since;       ///< the toolchain version that asked for it
    std::string statement;   ///< "since npuc 1.1.0: `vtrf` → `to_trf` (E0401)"
};

/// A source after the rewrites: which rules changed it, and how many places each.
struct Rewritten {
    std::string source;
    std::vector<std::pair<std::int64_t, int>> applied;  ///< rule id → replacements
};

/// Applies `rewrites` in order. A `from` made of identifier characters replaces whole
/// identifiers only (`vtrf` but not `vtrf2` or `my_vtrf`); any other text replaces literally.
Rewritten apply_rewrites(const std::string& source, const std::vector<SourceRewrite>& rewrites);

/// Dotted versions compared numerically, field by field ("1.10.0" > "1.9.2"); a field that is not
/// a number compares as text. Negative, zero or positive.
int compare_versions(std::string_view a, std::string_view b);

/// One family's known failure under a version.
struct KnownFailure {
    std::int64_t rule_id = 0;
    std::string family;
    std::string code;
    std::string statement;     ///< the generalised message
    std::int64_t designs = 0;  ///< different designs that failed with it
};

/// The rewrites and known failures of one target at one toolchain version, over the rule book.
class SourceRules {
public:
    SourceRules(store::KnowledgeStore& store, std::string target, std::string version, std::string toolchain_name);

    /// A fix-it kept for `design`: its rewrite rule, created or given one more design as evidence.
    std::int64_t record_rewrite(const target::SourceEdit& edit, const DesignRef& design);
    /// A fix-it that did not pass the check again: counter-evidence, and a rewrite of the same
    /// edit that exists is demoted (no longer applied).
    void reject_rewrite(const target::SourceEdit& edit, const DesignRef& design, const std::string& why);
    /// The rewrites to apply on this version: every active rewrite learnt on it or on an earlier
    /// version, oldest first.
    std::vector<SourceRewrite> rewrites();

    /// A design of `family` failed the check with `diagnostic`; returns the known failure's rule id.
    std::int64_t record_failure(const std::string& family, const target::Diagnostic& diagnostic, const DesignRef& design);
    /// A design of `family` passed the check: its known failures on this version are retired.
    void record_pass(const std::string& family, const DesignRef& design);
    /// Known failures of this version seen on at least `min_designs` different designs.
    std::vector<KnownFailure> known_failures(std::int64_t min_designs = 2);

private:
    store::KbRuleRecord new_rule(std::string_view kind, const std::string& code, std::string statement,
                                 const std::string& signature, const nlohmann::json& features) const;

    store::KnowledgeStore* m_store;
    std::string m_target;
    std::string m_version;
    std::string m_toolchain_name;
    std::optional<std::vector<store::KbRuleRecord>> m_known_failures;  ///< this version's, until the next write
};

}  // namespace npuopt::knowledge
