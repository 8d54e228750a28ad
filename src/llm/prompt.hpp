#pragma once
// Prompt templates: a file of mustache text (kainjow's mustache, from Debian) with a system part
// and a user part, rendered from named strings without HTML escaping ({{name}} and {{{name}}}
// alike insert the text as it is; {{#name}}…{{/name}} shows a part only when the text is not
// empty). The first line `---system---` / `---user---` markers split the file:
//
//   ---system---
//   You write kernels for {{target}} …
//   ---user---
//   Kernel: {{kernel}} …

#include <filesystem>
#include <map>
#include <string>

namespace npuopt::llm {

struct PromptParts {
    std::string system;
    std::string user;
};

class PromptTemplate {
public:
    /// Read and compile `file`; Error(invalid_config) naming the file when it is missing, has no
    /// ---user--- part, or its mustache does not parse.
    static PromptTemplate load(const std::filesystem::path& file);
    /// Compile `text` (named `origin` in errors).
    static PromptTemplate parse(const std::string& text, const std::string& origin);

    /// Render both parts; a name the template uses but `values` lacks renders as "".
    PromptParts render(const std::map<std::string, std::string>& values) const;
    const std::string& origin() const { return m_origin; }

private:
    std::string m_origin;
    std::string m_system;
    std::string m_user;
};

/// Rough token count of `text` (4 characters a token; what a budget is checked against before a call).
std::int64_t estimate_tokens(const std::string& text);

}  // namespace npuopt::llm
