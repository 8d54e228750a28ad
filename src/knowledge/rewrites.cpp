// Rewrites learnt from fix-its and known failures of families (rewrites.hpp), kept as rules of
// the rule book: kind `rewrite` (features: from, to) and kind `known_failure` (features: family).

#include "knowledge/rewrites.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npuopt::knowledge {

namespace {

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

bool is_identifier(const std::string& text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), is_identifier_char);
}

std::string rewrite_signature(const std::string& code, const std::string& from, const std::string& to) {
    return fmt::format("{}|{}|{}|{}", code, k_rule_rewrite, from, to);
}

std::string failure_signature(const std::string& family, const std::string& code, const std::string& statement) {
    return fmt::format("{}|{}|{}|{}", code, k_rule_known_failure, family, statement);
}

nlohmann::json features_of(const store::KbRuleRecord& rule) {
    auto json = nlohmann::json::parse(rule.features_json, nullptr, false);
    return json.is_object() ? json : nlohmann::json::object();
}

bool counts(const store::KbRuleRecord& rule) { return rule.status != "demoted" && rule.status != "retired"; }

/// Whether `design` is already evidence of `rule` with `outcome`.
bool has_evidence(store::KnowledgeStore& store, std::int64_t rule_id, const DesignRef& design, const std::string& outcome) {
    if (design.design_hash.empty()) return false;
    for (const auto& evidence : store.list_rule_evidence(rule_id)) {
        if (evidence.design_hash == design.design_hash && evidence.outcome == outcome) return true;
    }
    return false;
}

void add_evidence(store::KnowledgeStore& store, std::int64_t rule_id, const DesignRef& design, const std::string& outcome,
                  const std::string& version, const std::string& message) {
    store::RuleEvidenceRecord evidence;
    evidence.rule_id = rule_id;
    evidence.design_hash = design.design_hash;
    evidence.source_path = design.source_path.string();
    evidence.outcome = outcome;
    evidence.toolchain_version = version;
    evidence.message = message;
    store.add_rule_evidence(evidence);
}

}  // namespace

store::KbRuleRecord SourceRules::new_rule(std::string_view kind, const std::string& code, std::string statement,
                                          const std::string& signature, const nlohmann::json& features) const {
    store::KbRuleRecord rule;
    rule.target = m_target;
    rule.code = code;
    rule.statement = std::move(statement);
    rule.toolchain_version = m_version;
    rule.kind = std::string(kind);
    rule.signature = signature;
    rule.origin = "check";
    rule.evidence_count = 1;
    rule.confidence = rule_confidence(rule.kind, 1);
    rule.features_json = features.dump();
    return rule;
}

Rewritten apply_rewrites(const std::string& source, const std::vector<SourceRewrite>& rewrites) {
    Rewritten result;
    result.source = source;
    for (const auto& rewrite : rewrites) {
        if (rewrite.from.empty() || rewrite.from == rewrite.to) continue;
        const bool whole_words = is_identifier(rewrite.from);
        std::string out;
        int replaced = 0;
        std::size_t at = 0;
        const std::string& text = result.source;
        while (true) {
            const std::size_t found = text.find(rewrite.from, at);
            if (found == std::string::npos) break;
            const std::size_t end = found + rewrite.from.size();
            const bool bounded = !whole_words || ((found == 0 || !is_identifier_char(text[found - 1])) &&
                                                  (end >= text.size() || !is_identifier_char(text[end])));
            out.append(text, at, found - at);
            if (bounded) {
                out += rewrite.to;
                ++replaced;
            } else {
                out += rewrite.from;
            }
            at = end;
        }
        if (replaced == 0) continue;
        out.append(text, at, std::string::npos);
        result.source = std::move(out);
        result.applied.emplace_back(rewrite.rule_id, replaced);
    }
    return result;
}

int compare_versions(std::string_view a, std::string_view b) {
    while (!a.empty() || !b.empty()) {
        const std::size_t a_dot = a.find('.');
        const std::size_t b_dot = b.find('.');
        const std::string_view a_field = a.substr(0, a_dot);
        const std::string_view b_field = b.substr(0, b_dot);
        long a_number = 0;
        long b_number = 0;
        const auto a_parsed = std::from_chars(a_field.data(), a_field.data() + a_field.size(), a_number);
        const auto b_parsed = std::from_chars(b_field.data(), b_field.data() + b_field.size(), b_number);
        const bool numeric = a_parsed.ec == std::errc() && a_parsed.ptr == a_field.data() + a_field.size() &&
                             b_parsed.ec == std::errc() && b_parsed.ptr == b_field.data() + b_field.size();
        if (numeric && a_number != b_number) return a_number < b_number ? -1 : 1;
        if (!numeric && a_field != b_field) return a_field < b_field ? -1 : 1;
        a = a_dot == std::string_view::npos ? std::string_view() : a.substr(a_dot + 1);
        b = b_dot == std::string_view::npos ? std::string_view() : b.substr(b_dot + 1);
    }
    return 0;
}

SourceRules::SourceRules(store::KnowledgeStore& store, std::string target, std::string version, std::string toolchain_name)
    : m_store(&store), m_target(std::move(target)), m_version(std::move(version)), m_toolchain_name(std::move(toolchain_name)) {}

std::int64_t SourceRules::record_rewrite(const target::SourceEdit& edit, const DesignRef& design) {
    store::Transaction transaction(m_store->database());
    m_store->toolchain_version_id(m_target, m_toolchain_name, m_version);
    const std::string signature = rewrite_signature(edit.code, edit.from, edit.to);
    auto existing = m_store->find_rule_by_signature(m_target, m_version, signature);
    std::int64_t rule_id = 0;
    if (!existing) {
        store::KbRuleRecord rule = new_rule(k_rule_rewrite, edit.code,
                                            fmt::format("since {} {}: `{}` → `{}` ({}: {})", m_toolchain_name, m_version,
                                                        edit.from, edit.to, edit.code, edit.message),
                                            signature, {{"from", edit.from}, {"to", edit.to}});
        rule.status = "confirmed";  // the fix-it passed the check again on this design
        rule_id = m_store->insert_rule(rule);
    } else {
        store::KbRuleRecord rule = *existing;
        rule_id = rule.id;
        if (!has_evidence(*m_store, rule_id, design, "fixed")) ++rule.evidence_count;
        rule.confidence = rule_confidence(rule.kind, rule.evidence_count);
        m_store->update_rule(rule);
    }
    add_evidence(*m_store, rule_id, design, "fixed", m_version,
                 fmt::format("{} at {}:{}: `{}` → `{}` ({})", edit.code, edit.line, edit.column, edit.from, edit.to, edit.help));
    transaction.commit();
    return rule_id;
}

void SourceRules::reject_rewrite(const target::SourceEdit& edit, const DesignRef& design, const std::string& why) {
    store::Transaction transaction(m_store->database());
    m_store->toolchain_version_id(m_target, m_toolchain_name, m_version);
    const std::string signature = rewrite_signature(edit.code, edit.from, edit.to);
    auto existing = m_store->find_rule_by_signature(m_target, m_version, signature);
    std::int64_t rule_id = 0;
    if (existing) {
        store::KbRuleRecord rule = *existing;
        rule_id = rule.id;
        ++rule.counter_count;
        rule.status = "demoted";
        rule.confidence /= 4.0;
        m_store->update_rule(rule);
    } else {
        store::KbRuleRecord rule = new_rule(k_rule_rewrite, edit.code,
                                            fmt::format("{} {} suggests `{}` → `{}` ({}), but the fixed design still fails "
                                                        "the check",
                                                        m_toolchain_name, m_version, edit.from, edit.to, edit.code),
                                            signature, {{"from", edit.from}, {"to", edit.to}});
        rule.status = "demoted";
        rule.evidence_count = 0;
        rule.confidence = 0.0;
        rule.counter_count = 1;
        rule_id = m_store->insert_rule(rule);
    }
    add_evidence(*m_store, rule_id, design, "not_fixed", m_version, why);
    transaction.commit();
}

std::vector<SourceRewrite> SourceRules::rewrites() {
    std::vector<SourceRewrite> result;
    for (const auto& rule : m_store->list_rules(m_target, {}, true)) {
        if (rule.kind != k_rule_rewrite || !counts(rule)) continue;
        if (compare_versions(rule.toolchain_version, m_version) > 0) continue;  // learnt on a later version
        const auto features = features_of(rule);
        SourceRewrite rewrite;
        rewrite.rule_id = rule.id;
        rewrite.code = rule.code;
        rewrite.from = features.value("from", std::string());
        rewrite.to = features.value("to", std::string());
        rewrite.since = rule.toolchain_version;
        rewrite.statement = rule.statement;
        if (!rewrite.from.empty()) result.push_back(std::move(rewrite));
    }
    std::stable_sort(result.begin(), result.end(), [](const SourceRewrite& a, const SourceRewrite& b) {
        const int order = compare_versions(a.since, b.since);
        return order != 0 ? order < 0 : a.rule_id < b.rule_id;
    });
    return result;
}

std::int64_t SourceRules::record_failure(const std::string& family, const target::Diagnostic& diagnostic,
                                         const DesignRef& design) {
    m_known_failures.reset();
    store::Transaction transaction(m_store->database());
    m_store->toolchain_version_id(m_target, m_toolchain_name, m_version);
    const std::string statement = generalise_message(diagnostic.message);
    const std::string signature = failure_signature(family, diagnostic.code, statement);
    auto existing = m_store->find_rule_by_signature(m_target, m_version, signature);
    std::int64_t rule_id = 0;
    if (!existing) {
        rule_id = m_store->insert_rule(new_rule(
            k_rule_known_failure, diagnostic.code,
            fmt::format("family {} fails under {} {}: {}", family, m_toolchain_name, m_version, statement), signature,
            {{"family", family}}));
    } else {
        store::KbRuleRecord rule = *existing;
        rule_id = rule.id;
        if (!has_evidence(*m_store, rule_id, design, "rejected")) ++rule.evidence_count;
        if (rule.status == "retired") rule.status = "proposed";  // it failed again after a pass
        if (rule.evidence_count >= 2 && rule.status != "demoted") rule.status = "confirmed";
        rule.confidence = rule_confidence(rule.kind, rule.evidence_count);
        m_store->update_rule(rule);
    }
    add_evidence(*m_store, rule_id, design, "rejected", m_version, diagnostic.message);
    transaction.commit();
    return rule_id;
}

void SourceRules::record_pass(const std::string& family, const DesignRef& design) {
    m_known_failures.reset();
    store::Transaction transaction(m_store->database());
    for (auto rule : m_store->list_rules(m_target, m_version, false)) {
        if (rule.kind != k_rule_known_failure || !counts(rule)) continue;
        if (features_of(rule).value("family", std::string()) != family) continue;
        rule.status = "retired";
        rule.retired_in = m_version;
        ++rule.counter_count;
        m_store->update_rule(rule);
        add_evidence(*m_store, rule.id, design, "accepted", m_version, "a design of the family passed the check");
    }
    transaction.commit();
}

std::vector<KnownFailure> SourceRules::known_failures(std::int64_t min_designs) {
    // Asked before every step: the rules are read again only after this object wrote one (a
    // write rolled back with its step also just re-reads them).
    if (!m_known_failures) {
        m_known_failures.emplace();
        for (const auto& rule : m_store->list_rules(m_target, m_version, false)) {
            if (rule.kind == k_rule_known_failure && counts(rule)) m_known_failures->push_back(rule);
        }
    }
    std::vector<KnownFailure> result;
    for (const auto& rule : *m_known_failures) {
        if (rule.evidence_count < min_designs) continue;
        KnownFailure failure;
        failure.rule_id = rule.id;
        failure.family = features_of(rule).value("family", std::string());
        failure.code = rule.code;
        failure.statement = rule.statement;
        failure.designs = rule.evidence_count;
        result.push_back(std::move(failure));
    }
    return result;
}

}  // namespace npuopt::knowledge
