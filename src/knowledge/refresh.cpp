#include "knowledge/refresh.hpp"

#include <fmt/format.h>

#include <fstream>
#include <map>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace npuopt::knowledge {

namespace fs = std::filesystem;

namespace {

std::string format_limit(const std::optional<double>& limit) { return limit ? fmt::format("{:g}", *limit) : "—"; }

/// `text` with the release's own number ("1.1.0", "1.1") replaced by "<release>", so that a page
/// that only restates its release number does not count as changed.
std::string without_release(std::string text, const std::string& version) {
    std::vector<std::string> forms = {version};
    if (auto second_dot = version.find('.', version.find('.') + 1); second_dot != std::string::npos) {
        forms.push_back(version.substr(0, second_dot));
    }
    auto is_number_char = [](char character) { return (character >= '0' && character <= '9') || character == '.'; };
    for (const std::string& form : forms) {
        if (form.empty()) continue;
        std::size_t pos = 0;
        while ((pos = text.find(form, pos)) != std::string::npos) {
            std::size_t end = pos + form.size();
            bool bounded = (pos == 0 || !is_number_char(text[pos - 1])) &&
                           (end >= text.size() || !is_number_char(text[end]) ||
                            (text[end] == '.' && (end + 1 >= text.size() || !is_number_char(text[end + 1]))));
            if (bounded) {
                text.replace(pos, form.size(), "<release>");
                pos += 9;
            } else {
                pos = end;
            }
        }
    }
    return text;
}

RuleChange change_of(const store::KbRuleRecord& rule) {
    return {rule.signature, rule.code, rule.quantity, rule.limit, rule.limit, render_rule(rule)};
}

/// One evidence design compiled by the new toolchain (cached: rules share designs).
struct Compiled {
    bool ran = false;  ///< the toolchain gave a verdict (ok or diagnostics)
    bool ok = false;
    std::vector<target::Diagnostic> diagnostics;
};

class Revalidator {
public:
    Revalidator(KnowledgeBase& kb, const target::Toolchain& toolchain, const RefreshOptions& options,
                RuleBook& new_rules, RefreshReport& report)
        : m_kb(kb), m_toolchain(toolchain), m_options(options), m_new_rules(new_rules), m_report(report) {
        m_scratch = options.scratch_dir.empty() ? kb.store().database().file().parent_path() / "kb-refresh-scratch"
                                                : options.scratch_dir;
    }
    ~Revalidator() {
        std::error_code ignored;
        if (m_made_scratch) fs::remove_all(m_scratch, ignored);
    }
    Revalidator(const Revalidator&) = delete;
    Revalidator& operator=(const Revalidator&) = delete;

    const Compiled& compile(const store::RuleEvidenceRecord& evidence) {
        const std::string key = evidence.design_hash.empty() ? evidence.source_path : evidence.design_hash;
        auto found = m_cache.find(key);
        if (found != m_cache.end()) return found->second;
        Compiled& compiled = m_cache[key];
        auto path = source_of(evidence);
        if (!path) return compiled;
        target::CheckResult result = m_toolchain.check(*path);
        ++m_report.designs_compiled;
        if (result.call.status != target::CallStatus::ok && result.call.status != target::CallStatus::failed) {
            return compiled;  // crashed, timed out, unparsable: no verdict
        }
        compiled.ran = true;
        compiled.ok = result.ok && result.call.status == target::CallStatus::ok;
        compiled.diagnostics = result.diagnostics;
        m_new_rules.mine_diagnostics(result.diagnostics, DesignRef{evidence.design_hash, *path, {}}, "check");
        return compiled;
    }

private:
    std::optional<fs::path> source_of(const store::RuleEvidenceRecord& evidence) {
        std::error_code error;
        if (!evidence.source_path.empty() && fs::is_regular_file(evidence.source_path, error)) {
            return fs::path(evidence.source_path);
        }
        if (!evidence.design_hash.empty()) {
            if (auto source = m_kb.store().design_source(evidence.design_hash)) {
                fs::create_directories(m_scratch, error);
                m_made_scratch = true;
                fs::path file = m_scratch / (evidence.design_hash.substr(0, 16) + m_options.source_extension);
                std::ofstream(file, std::ios::binary) << *source;
                return fs::absolute(file, error);
            }
            if (m_options.locate_source) return m_options.locate_source(evidence.design_hash);
        }
        return std::nullopt;
    }

    KnowledgeBase& m_kb;
    const target::Toolchain& m_toolchain;
    const RefreshOptions& m_options;
    RuleBook& m_new_rules;
    RefreshReport& m_report;
    fs::path m_scratch;
    bool m_made_scratch = false;
    std::map<std::string, Compiled> m_cache;
};

/// Copy an old-version rule into the new version, unverified, with its evidence.
void carry_unverified(store::KnowledgeStore& store, const store::KbRuleRecord& rule, const std::string& version) {
    if (store.find_rule_by_signature(rule.target, version, rule.signature)) return;
    store::KbRuleRecord copy = rule;
    copy.toolchain_version = version;
    copy.status = "unverified";
    copy.confidence = rule.confidence * 0.5;
    copy.stale = false;
    copy.retired_in.clear();
    std::int64_t copy_id = store.insert_rule(copy);
    for (auto evidence : store.list_rule_evidence(rule.id)) {
        evidence.rule_id = copy_id;
        store.add_rule_evidence(evidence);
    }
}

}  // namespace

RefreshReport refresh(KnowledgeBase& kb, const target::Toolchain& toolchain, const RefreshOptions& options) {
    target::VersionResult version = toolchain.version();
    if (version.call.status != target::CallStatus::ok || version.version.empty()) {
        throw Error(ErrorKind::toolchain, fmt::format("cannot read the version of target {}'s toolchain: {}",
                                                      kb.target(), version.call.message));
    }
    RefreshReport report;
    report.old_version = kb.current_version();
    report.new_version = version.version;
    if (report.old_version == report.new_version && !options.force) return report;
    report.changed = true;

    store::KnowledgeStore& store = kb.store();
    // Record the version but move the KB's pointer to it only at the end: a refresh that dies
    // half-way is redone by the next one (every step below is idempotent).
    store.toolchain_version_id(kb.target(), version.name, version.version);
    report.marked_stale = store.mark_stale_except(kb.target(), version.version);

    const std::string previous_name = kb.toolchain_name();
    kb.set_current_version(version.name, version.version);
    try {
        report.ingest = kb.ingest_docs(options.summarizer);
    } catch (...) {
        if (!report.old_version.empty()) kb.set_current_version(previous_name, report.old_version);
        throw;
    }

    RuleBook new_rules(store, kb.target(), version.version);
    if (!report.old_version.empty() && report.old_version != report.new_version) {
        Revalidator revalidator(kb, toolchain, options, new_rules, report);
        for (auto rule : store.list_rules(kb.target(), report.old_version, true)) {
            if (rule.status == "retired" || rule.status == "demoted") continue;
            ++report.rules_revalidated;
            bool reproduced = false;
            bool all_compile = true;
            bool any_verdict = false;
            std::vector<store::RuleEvidenceRecord> compiled_evidence;
            if (rule.kind != k_rule_runtime) {
                for (const auto& evidence : store.list_rule_evidence(rule.id)) {
                    if (evidence.outcome != "rejected") continue;
                    const Compiled& compiled = revalidator.compile(evidence);
                    if (!compiled.ran) {
                        all_compile = false;
                        continue;
                    }
                    any_verdict = true;
                    for (const auto& diagnostic : compiled.diagnostics) {
                        if (diagnostic.code == rule.code) reproduced = true;
                    }
                    if (compiled.ok) {
                        compiled_evidence.push_back(evidence);
                    } else {
                        all_compile = false;
                    }
                }
            }
            if (reproduced) {
                ++report.rules_kept;
            } else if (any_verdict && all_compile) {
                rule.status = "retired";
                rule.retired_in = version.version;
                store.update_rule(rule);
                for (auto evidence : compiled_evidence) {
                    evidence.outcome = "compiles";
                    evidence.toolchain_version = version.version;
                    evidence.message = fmt::format("compiles with {} {}", version.name, version.version);
                    store.add_rule_evidence(evidence);
                }
                ++report.rules_retired;
            } else {
                carry_unverified(store, rule, version.version);
                ++report.rules_unverified;
            }
        }
    }
    if (options.remeasure) {
        options.remeasure(version.version);
        report.remeasured = true;
    }
    if (!report.old_version.empty()) report.diff = diff(kb, report.old_version, report.new_version);
    return report;
}

KbDiff diff(KnowledgeBase& kb, const std::string& old_version, const std::string& new_version) {
    KbDiff result;
    result.old_version = old_version;
    result.new_version = new_version;
    store::KnowledgeStore& store = kb.store();

    // Sections match by page and heading with numbers generalised: vendors put the release in
    // their headings ("DMA (npuc 1.0)"), which must not turn every section into a new one.
    struct SectionKey {
        std::string label;  ///< "page.md § Heading > Path" as the version has it
        std::string hash;
    };
    auto sections_by_key = [&](const std::string& version) {
        std::map<std::string, SectionKey> sections;  // page|generalised heading → latest
        for (const auto& section : store.list_sections(kb.target(), version)) {
            sections[section.source_path + "|" + generalise_message(section.heading_path)] = {
                fmt::format("{} § {}", section.source_path, section.heading_path),
                content_hash(without_release(section.heading_path + "\n" + section.text, version))};
        }
        return sections;
    };
    auto old_sections = sections_by_key(old_version);
    auto new_sections = sections_by_key(new_version);
    for (const auto& [key, section] : new_sections) {
        auto found = old_sections.find(key);
        if (found == old_sections.end()) {
            result.sections_added.push_back(section.label);
        } else if (found->second.hash != section.hash) {
            result.sections_changed.push_back(section.label);
        }
    }
    for (const auto& [key, section] : old_sections) {
        if (!new_sections.contains(key)) result.sections_removed.push_back(section.label);
    }

    std::map<std::string, store::KbRuleRecord> old_rules;
    std::map<std::string, store::KbRuleRecord> new_rules;
    for (auto& rule : store.list_rules(kb.target(), old_version)) old_rules[rule.signature] = rule;
    for (auto& rule : store.list_rules(kb.target(), new_version)) new_rules[rule.signature] = rule;
    for (const auto& [signature, rule] : new_rules) {
        auto found = old_rules.find(signature);
        if (found == old_rules.end()) {
            result.rules_added.push_back(change_of(rule));
            continue;
        }
        RuleChange change = change_of(rule);
        change.old_limit = found->second.limit;
        bool limit_differs = rule.limit.has_value() != found->second.limit.has_value() ||
                             (rule.limit && found->second.limit && *rule.limit != *found->second.limit);
        (limit_differs ? result.rules_limit_changed : result.rules_kept).push_back(change);
    }
    for (const auto& [signature, rule] : old_rules) {
        if (new_rules.contains(signature)) continue;
        if (rule.status != "demoted") {  // a demoted rule was never believed
            RuleChange change = change_of(rule);
            change.new_limit.reset();
            result.rules_retired.push_back(change);
        }
    }

    auto facts_by_key = [&](const std::string& version) {
        std::map<std::string, store::FactRecord> facts;
        for (auto& fact : store.list_facts(kb.target(), version)) facts[fact.kind + "|" + fact.key] = fact;
        return facts;
    };
    auto old_facts = facts_by_key(old_version);
    auto new_facts = facts_by_key(new_version);
    for (const auto& [key, fact] : new_facts) {
        auto found = old_facts.find(key);
        FactChange change{fact.kind, fact.key, std::nullopt, fact.value};
        if (found == old_facts.end()) {
            result.facts_added.push_back(change);
        } else {
            change.old_value = found->second.value;
            result.facts_remeasured.push_back(change);
        }
    }
    for (const auto& [key, fact] : old_facts) {
        if (!new_facts.contains(key)) result.facts_dropped.push_back({fact.kind, fact.key, fact.value, std::nullopt});
    }
    return result;
}

std::string KbDiff::to_markdown() const {
    std::string out = fmt::format("# Knowledge base: {} → {}\n\n", old_version, new_version);
    auto list = [&](std::string_view title, const std::vector<std::string>& items) {
        out += fmt::format("## {} ({})\n\n", title, items.size());
        for (const auto& item : items) out += fmt::format("- {}\n", item);
        out += "\n";
    };
    auto rules = [&](std::string_view title, const std::vector<RuleChange>& items, bool show_limits) {
        out += fmt::format("## {} ({})\n\n", title, items.size());
        for (const auto& item : items) {
            out += show_limits ? fmt::format("- {} {}: {} → {}\n", item.code, item.quantity, format_limit(item.old_limit),
                                             format_limit(item.new_limit))
                               : fmt::format("- {}\n", item.text);
        }
        out += "\n";
    };
    auto facts = [&](std::string_view title, const std::vector<FactChange>& items) {
        out += fmt::format("## {} ({})\n\n", title, items.size());
        for (const auto& item : items) {
            out += fmt::format("- {} {}: {} → {}\n", item.kind, item.key, format_limit(item.old_value),
                               format_limit(item.new_value));
        }
        out += "\n";
    };
    list("Doc sections added", sections_added);
    list("Doc sections removed", sections_removed);
    list("Doc sections changed", sections_changed);
    rules("Rules added", rules_added, false);
    rules("Rules retired", rules_retired, false);
    rules("Rule limits changed", rules_limit_changed, true);
    out += fmt::format("Rules kept: {}\n\n", rules_kept.size());
    facts("Facts re-measured", facts_remeasured);
    facts("Facts added", facts_added);
    facts("Facts dropped", facts_dropped);
    return out;
}

nlohmann::json KbDiff::to_json() const {
    auto rules = [](const std::vector<RuleChange>& items) {
        nlohmann::json json = nlohmann::json::array();
        for (const auto& item : items) {
            json.push_back({{"signature", item.signature},
                            {"code", item.code},
                            {"quantity", item.quantity},
                            {"old_limit", item.old_limit ? nlohmann::json(*item.old_limit) : nlohmann::json(nullptr)},
                            {"new_limit", item.new_limit ? nlohmann::json(*item.new_limit) : nlohmann::json(nullptr)},
                            {"text", item.text}});
        }
        return json;
    };
    auto facts = [](const std::vector<FactChange>& items) {
        nlohmann::json json = nlohmann::json::array();
        for (const auto& item : items) {
            json.push_back({{"kind", item.kind},
                            {"key", item.key},
                            {"old_value", item.old_value ? nlohmann::json(*item.old_value) : nlohmann::json(nullptr)},
                            {"new_value", item.new_value ? nlohmann::json(*item.new_value) : nlohmann::json(nullptr)}});
        }
        return json;
    };
    return {{"old_version", old_version},
            {"new_version", new_version},
            {"sections_added", sections_added},
            {"sections_removed", sections_removed},
            {"sections_changed", sections_changed},
            {"rules_added", rules(rules_added)},
            {"rules_retired", rules(rules_retired)},
            {"rules_limit_changed", rules(rules_limit_changed)},
            {"rules_kept", rules(rules_kept)},
            {"facts_remeasured", facts(facts_remeasured)},
            {"facts_added", facts(facts_added)},
            {"facts_dropped", facts(facts_dropped)}};
}

}  // namespace npuopt::knowledge
