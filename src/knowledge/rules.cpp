#include "knowledge/rules.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.hpp"

namespace npuopt::knowledge {

namespace {

std::string lower_case(std::string_view text) {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower;
}

bool contains_any(const std::string& haystack, std::initializer_list<std::string_view> needles) {
    return std::any_of(needles.begin(), needles.end(),
                       [&](std::string_view needle) { return haystack.find(needle) != std::string::npos; });
}

bool is_modulus_quantity(const std::string& name) {
    return name == "multiple_of" || name == "alignment" || name == "align" || name == "modulus" ||
           (name.size() > 9 && name.ends_with("_multiple"));
}

bool nearly_equal(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

std::string format_number(double value) {
    if (std::fabs(value - std::round(value)) < 1e-9 && std::fabs(value) < 1e15) {
        return fmt::format("{}", static_cast<long long>(std::llround(value)));
    }
    return fmt::format("{:g}", value);
}

std::string quantities_json(const std::vector<target::Quantity>& quantities) {
    nlohmann::json json = nlohmann::json::object();
    for (const auto& quantity : quantities) {
        json[quantity.name] = quantity.limit ? nlohmann::json{{"value", quantity.value}, {"limit", *quantity.limit}}
                                             : nlohmann::json{{"value", quantity.value}};
    }
    return json.dump();
}

std::string features_json(const Quantities& features) {
    nlohmann::json json = nlohmann::json::object();
    for (const auto& [name, value] : features) json[name] = value;
    return json.dump();
}

Quantities parse_features(const std::string& text) {
    Quantities features;
    auto json = nlohmann::json::parse(text, nullptr, false);
    if (!json.is_object()) return features;
    for (const auto& [name, value] : json.items()) {
        if (value.is_number()) features[name] = value.get<double>();
    }
    return features;
}

bool is_bound_kind(const std::string& kind) {
    return kind == k_rule_upper_bound || kind == k_rule_lower_bound || kind == k_rule_multiple_of;
}

/// Accepted designs kept per version (meta key), newest last; the oldest go beyond this many.
constexpr std::size_t k_acceptance_log_size = 20000;

std::string acceptance_log_key(const std::string& target, const std::string& version) {
    return fmt::format("rules.accepted|{}|{}", target, version);
}

}  // namespace

std::string generalise_message(std::string_view message) {
    std::string result;
    std::size_t pos = 0;
    while (pos < message.size()) {
        char character = message[pos];
        if (std::isalpha(static_cast<unsigned char>(character)) != 0 || character == '_') {
            std::size_t end = pos;
            while (end < message.size() &&
                   (std::isalnum(static_cast<unsigned char>(message[end])) != 0 || message[end] == '_')) {
                ++end;
            }
            result.append(message.substr(pos, end - pos));
            pos = end;
        } else if (std::isdigit(static_cast<unsigned char>(character)) != 0) {
            std::size_t end = pos;
            while (end < message.size() &&
                   (std::isdigit(static_cast<unsigned char>(message[end])) != 0 ||
                    ((message[end] == '.' || message[end] == ',' || message[end] == 'x') && end + 1 < message.size() &&
                     std::isxdigit(static_cast<unsigned char>(message[end + 1])) != 0))) {
                ++end;
            }
            result += 'N';
            pos = end;
        } else {
            result += character;
            ++pos;
        }
    }
    return result;
}

std::vector<RuleDraft> draft_rules(const target::Diagnostic& diagnostic) {
    std::vector<RuleDraft> drafts;
    const std::string statement = generalise_message(diagnostic.message);
    const std::string message = lower_case(diagnostic.message);

    const target::Quantity* modulus = nullptr;
    const target::Quantity* subject = nullptr;
    for (const auto& quantity : diagnostic.quantities) {
        if (is_modulus_quantity(quantity.name)) {
            modulus = &quantity;
        } else if (subject == nullptr) {
            subject = &quantity;
        }
    }
    if (modulus != nullptr && subject != nullptr && modulus->value > 0) {
        drafts.push_back({diagnostic.code, std::string(k_rule_multiple_of), statement, subject->name, modulus->value,
                          fmt::format("{}|{}|{}", diagnostic.code, k_rule_multiple_of, subject->name)});
        return drafts;
    }

    const bool says_equal = contains_any(message, {"must equal", "equal to", "must match", "does not match"});
    const bool says_lower = contains_any(message, {"at least", "≥", ">=", "below", "smaller than", "too small",
                                                   "fewer than", "minimum"});
    for (const auto& quantity : diagnostic.quantities) {
        if (!quantity.limit || says_equal) continue;
        std::string_view kind;
        if (quantity.value > *quantity.limit && !says_lower) {
            kind = k_rule_upper_bound;  // the protocol's limit is a maximum unless the message says otherwise
        } else if (quantity.value < *quantity.limit && says_lower) {
            kind = k_rule_lower_bound;
        } else {
            continue;  // not the violated quantity, or a direction the message does not support
        }
        drafts.push_back({diagnostic.code, std::string(kind), statement, quantity.name, *quantity.limit,
                          fmt::format("{}|{}|{}", diagnostic.code, kind, quantity.name)});
    }
    if (drafts.empty()) {
        drafts.push_back({diagnostic.code, std::string(k_rule_statement), statement,
                          diagnostic.quantities.empty() ? std::string() : diagnostic.quantities.front().name,
                          std::nullopt, fmt::format("{}|{}|{}", diagnostic.code, k_rule_statement, statement)});
    }
    return drafts;
}

double rule_confidence(std::string_view kind, std::int64_t evidence_count) {
    double base = 0.5;
    if (kind == k_rule_upper_bound || kind == k_rule_lower_bound || kind == k_rule_multiple_of) base = 0.6;
    if (kind == k_rule_runtime) base = 0.4;  // a run is noisy: one hang could be a fluke
    return 1.0 - std::pow(1.0 - base, static_cast<double>(std::max<std::int64_t>(evidence_count, 0)));
}

bool is_rule_active(const store::KbRuleRecord& rule) {
    return !rule.stale && (rule.status == "proposed" || rule.status == "confirmed" || rule.status == "unverified");
}

std::optional<Violation> evaluate_rule(const store::KbRuleRecord& rule, const Quantities& quantities) {
    Violation violation{rule.id, rule.code, rule.kind, rule.quantity, 0.0, rule.limit, rule.confidence, {}};
    if (rule.kind == k_rule_runtime) {
        Quantities features = parse_features(rule.features_json);
        if (features.empty()) return std::nullopt;
        for (const auto& [name, value] : features) {
            auto found = quantities.find(name);
            if (found == quantities.end() || !nearly_equal(found->second, value)) return std::nullopt;
        }
        violation.quantity = features.begin()->first;
        violation.value = features.begin()->second;
        violation.text = render_rule(rule);
        return violation;
    }
    if (!rule.limit || rule.quantity.empty()) return std::nullopt;
    auto found = quantities.find(rule.quantity);
    if (found == quantities.end()) return std::nullopt;
    const double value = found->second;
    bool violated = false;
    if (rule.kind == k_rule_upper_bound) {
        violated = value > *rule.limit && !nearly_equal(value, *rule.limit);
    } else if (rule.kind == k_rule_lower_bound) {
        violated = value < *rule.limit && !nearly_equal(value, *rule.limit);
    } else if (rule.kind == k_rule_multiple_of && *rule.limit > 0) {
        double remainder = std::fmod(value, *rule.limit);
        violated = !nearly_equal(remainder, 0.0) && !nearly_equal(remainder, *rule.limit);
    }
    if (!violated) return std::nullopt;
    violation.value = value;
    violation.text = render_rule(rule);
    return violation;
}

std::string render_rule(const store::KbRuleRecord& rule) {
    std::string condition;
    if (rule.kind == k_rule_upper_bound && rule.limit) {
        condition = fmt::format("{} ≤ {}", rule.quantity, format_number(*rule.limit));
    } else if (rule.kind == k_rule_lower_bound && rule.limit) {
        condition = fmt::format("{} ≥ {}", rule.quantity, format_number(*rule.limit));
    } else if (rule.kind == k_rule_multiple_of && rule.limit) {
        condition = fmt::format("{} is a multiple of {}", rule.quantity, format_number(*rule.limit));
    } else if (rule.kind == k_rule_runtime) {
        std::vector<std::string> parts;
        for (const auto& [name, value] : parse_features(rule.features_json)) {
            parts.push_back(fmt::format("{} = {}", name, format_number(value)));
        }
        condition = parts.empty() ? std::string("fails at run time")
                                  : fmt::format("fails at run time when {}", fmt::join(parts, " and "));
    }
    std::string text = fmt::format("{} {}", rule.code, rule.statement);
    if (!condition.empty()) text += fmt::format(" — {}", condition);
    text += fmt::format(" (toolchain {}; {} design{}; confidence {:.2f}; {}{})", rule.toolchain_version,
                        rule.evidence_count, rule.evidence_count == 1 ? "" : "s", rule.confidence, rule.status,
                        rule.stale ? "; stale" : "");
    if (!rule.retired_in.empty()) text += fmt::format(" [retired in {}]", rule.retired_in);
    return text;
}

RuleBook::RuleBook(store::KnowledgeStore& store, std::string target, std::string version)
    : m_store(&store), m_target(std::move(target)), m_version(std::move(version)) {
    if (m_version.empty()) {
        throw Error(ErrorKind::internal,
                    fmt::format("rule book of target {} needs a toolchain version (refresh the knowledge base first)",
                                m_target));
    }
}

namespace {

/// Text bound for campaign.db (a rule's statement, an evidence message), capped whatever its source,
/// as target/'s parser caps what a toolchain prints.
std::string capped_for_store(const std::string& text) {
    constexpr std::size_t k_max_chars = target::k_diagnostic_message_max_chars;
    if (text.size() <= k_max_chars) return text;
    const std::string marker = fmt::format("… [{} bytes cut]", text.size());
    std::size_t cut_at = k_max_chars - marker.size();
    while (cut_at > 0 && (static_cast<unsigned char>(text[cut_at]) & 0xC0U) == 0x80U) --cut_at;
    return text.substr(0, cut_at) + marker;
}

}  // namespace

std::int64_t RuleBook::merge_draft(const RuleDraft& draft, const DesignRef& design, std::string_view origin,
                                   const std::string& message, const std::string& quantities) {
    auto existing = m_store->find_rule_by_signature(m_target, m_version, draft.signature);
    std::int64_t rule_id = 0;
    bool bound_changed = false;  // a new bound, or a bound whose kind or limit changed: re-check the log
    if (!existing) {
        store::KbRuleRecord rule;
        rule.target = m_target;
        rule.code = draft.code;
        rule.statement = capped_for_store(draft.statement);
        rule.quantity = draft.quantity;
        rule.limit = draft.limit;
        rule.toolchain_version = m_version;
        rule.kind = draft.kind;
        rule.signature = draft.signature;
        rule.origin = std::string(origin);
        rule.evidence_count = 1;
        rule.confidence = rule_confidence(rule.kind, 1);
        rule_id = m_store->insert_rule(rule);
        bound_changed = is_bound_kind(rule.kind);
    } else {
        store::KbRuleRecord rule = *existing;
        rule_id = rule.id;
        bool known_design = false;
        if (!design.design_hash.empty()) {
            for (const auto& evidence : m_store->list_rule_evidence(rule.id)) {
                if (evidence.design_hash == design.design_hash && evidence.outcome == "rejected") known_design = true;
            }
        }
        if (!known_design) ++rule.evidence_count;
        if (rule.limit && draft.limit && !nearly_equal(*rule.limit, *draft.limit) && rule.kind != k_rule_statement) {
            // The limit differs between designs: it depends on the design, not on the chip.
            rule.kind = std::string(k_rule_statement);
            rule.limit.reset();
        }
        bound_changed = is_bound_kind(rule.kind) && (rule.kind != existing->kind || rule.limit != existing->limit);
        if (rule.status != "demoted" && rule.status != "retired") {
            rule.confidence = rule_confidence(rule.kind, rule.evidence_count);
            if (rule.evidence_count >= 2) rule.status = "confirmed";
        }
        m_store->update_rule(rule);
    }
    store::RuleEvidenceRecord evidence;
    evidence.rule_id = rule_id;
    evidence.design_hash = design.design_hash;
    evidence.source_path = design.source_path.string();
    evidence.outcome = "rejected";
    evidence.toolchain_version = m_version;
    evidence.quantities_json = quantities;
    evidence.message = capped_for_store(message);
    m_store->add_rule_evidence(evidence);
    if (bound_changed) demote_if_contradicted(rule_id);
    return rule_id;
}

std::vector<RuleBook::LoggedAcceptance> RuleBook::acceptance_log() {
    std::vector<LoggedAcceptance> log;
    auto text = m_store->meta(acceptance_log_key(m_target, m_version));
    if (!text) return log;
    auto json = nlohmann::json::parse(*text, nullptr, false);
    if (!json.is_array()) return log;
    for (const auto& entry : json) {
        if (!entry.is_object()) continue;
        LoggedAcceptance accepted;
        accepted.design_hash = entry.value("design", std::string());
        accepted.quantities = parse_features(entry.value("quantities", nlohmann::json::object()).dump());
        log.push_back(std::move(accepted));
    }
    return log;
}

void RuleBook::log_acceptance(const Quantities& quantities, const DesignRef& design) {
    if (quantities.empty()) return;  // nothing a rule could ever be checked against
    auto log = acceptance_log();
    for (const auto& entry : log) {
        if (entry.quantities == quantities) return;  // the same declaration: nothing new to check against
    }
    log.push_back({design.design_hash, quantities});
    if (log.size() > k_acceptance_log_size) log.erase(log.begin(), log.begin() + static_cast<std::ptrdiff_t>(log.size() - k_acceptance_log_size));
    nlohmann::json json = nlohmann::json::array();
    for (const auto& entry : log) {
        json.push_back({{"design", entry.design_hash}, {"quantities", nlohmann::json::parse(features_json(entry.quantities))}});
    }
    m_store->set_meta(acceptance_log_key(m_target, m_version), json.dump());
}

bool RuleBook::demote_if_contradicted(std::int64_t rule_id) {
    auto rule = m_store->find_rule(rule_id);
    if (!rule || !is_rule_active(*rule) || !is_bound_kind(rule->kind)) return false;
    for (const auto& accepted : acceptance_log()) {
        if (!evaluate_rule(*rule, accepted.quantities)) continue;
        // The toolchain accepted a design this rule rejects, before the rule was mined.
        rule->status = "demoted";
        rule->confidence *= 0.25;
        ++rule->counter_count;
        m_store->update_rule(*rule);
        store::RuleEvidenceRecord evidence;
        evidence.rule_id = rule->id;
        evidence.design_hash = accepted.design_hash;
        evidence.outcome = "accepted";
        evidence.toolchain_version = m_version;
        evidence.quantities_json = features_json(accepted.quantities);
        evidence.message = "the toolchain accepted an earlier design this rule rejects";
        m_store->add_rule_evidence(evidence);
        return true;
    }
    return false;
}

std::vector<std::int64_t> RuleBook::mine_diagnostics(const std::vector<target::Diagnostic>& diagnostics,
                                                     const DesignRef& design, std::string_view origin) {
    std::vector<std::int64_t> rule_ids;
    store::Transaction transaction(m_store->database());
    for (const auto& diagnostic : diagnostics) {
        if (diagnostic.code.empty()) continue;
        for (RuleDraft draft : draft_rules(diagnostic)) {
            if (diagnostic.level == "warning") {  // a warning rejects nothing: text only
                draft.kind = std::string(k_rule_statement);
                draft.limit.reset();
                draft.signature = fmt::format("{}|warning|{}", draft.code, draft.statement);
            }
            std::int64_t rule_id =
                merge_draft(draft, design, origin, diagnostic.message, quantities_json(diagnostic.quantities));
            if (std::find(rule_ids.begin(), rule_ids.end(), rule_id) == rule_ids.end()) rule_ids.push_back(rule_id);
        }
    }
    transaction.commit();
    return rule_ids;
}

std::int64_t RuleBook::record_runtime_failure(const RuntimeFailure& failure, const DesignRef& design) {
    RuleDraft draft;
    draft.code = fmt::format("runtime:{}", failure.kind);
    draft.kind = std::string(k_rule_runtime);
    draft.statement = failure.message.empty() ? fmt::format("the design fails at run time ({})", failure.kind)
                                              : generalise_message(failure.message);
    draft.quantity = failure.features.empty() ? std::string() : failure.features.begin()->first;
    const std::string features = features_json(failure.features);
    draft.signature = fmt::format("{}|{}|{}", draft.code, k_rule_runtime, features);
    store::Transaction transaction(m_store->database());
    std::int64_t rule_id = merge_draft(draft, design, "run", failure.message, features);
    auto rule = m_store->find_rule(rule_id);
    if (rule && rule->features_json != features) {
        rule->features_json = features;
        m_store->update_rule(*rule);
    }
    transaction.commit();
    return rule_id;
}

std::vector<std::int64_t> RuleBook::record_run_result(const target::RunResult& result, const DesignRef& design,
                                                      const Quantities& features) {
    std::vector<std::int64_t> rule_ids = mine_diagnostics(result.diagnostics, design, "run");
    std::optional<RuntimeFailure> failure;
    if (result.call.status == target::CallStatus::timed_out) {
        failure = RuntimeFailure{"hang", "the run hung (no answer before its time limit)", features};
    } else if (result.error_kind == "device") {
        failure = RuntimeFailure{"device", result.call.message, features};
    }
    if (failure) rule_ids.push_back(record_runtime_failure(*failure, design));
    return rule_ids;
}

std::vector<Violation> RuleBook::check_quantities(const Quantities& quantities) {
    std::vector<Violation> violations;
    for (const auto& rule : list(false)) {
        if (!is_rule_active(rule)) continue;
        if (auto violation = evaluate_rule(rule, quantities)) violations.push_back(std::move(*violation));
    }
    return violations;
}

std::vector<std::int64_t> RuleBook::record_acceptance(const Quantities& quantities, const DesignRef& design) {
    std::vector<std::int64_t> demoted;
    store::Transaction transaction(m_store->database());
    for (auto rule : list(false)) {
        // A compiled design says nothing about run-time failures: runtime rules stay.
        if (!is_rule_active(rule) || rule.kind == k_rule_runtime || !evaluate_rule(rule, quantities)) continue;
        rule.status = "demoted";
        rule.confidence *= 0.25;
        ++rule.counter_count;
        m_store->update_rule(rule);
        store::RuleEvidenceRecord evidence;
        evidence.rule_id = rule.id;
        evidence.design_hash = design.design_hash;
        evidence.source_path = design.source_path.string();
        evidence.outcome = "accepted";
        evidence.toolchain_version = m_version;
        evidence.quantities_json = features_json(quantities);
        evidence.message = "the toolchain accepted a design this rule rejects";
        m_store->add_rule_evidence(evidence);
        demoted.push_back(rule.id);
    }
    log_acceptance(quantities, design);
    transaction.commit();
    return demoted;
}

std::vector<store::KbRuleRecord> RuleBook::list(bool include_stale) {
    return m_store->list_rules(m_target, m_version, include_stale);
}

std::string RuleBook::render_text() {
    std::vector<store::KbRuleRecord> rules = list(false);
    std::erase_if(rules, [](const store::KbRuleRecord& rule) { return !is_rule_active(rule); });
    std::stable_sort(rules.begin(), rules.end(),
                     [](const auto& a, const auto& b) { return a.confidence > b.confidence; });
    std::string text;
    for (const auto& rule : rules) text += render_rule(rule) + "\n";
    return text;
}

}  // namespace npuopt::knowledge
