#pragma once
// Taking the payload out of a reply's text: fenced code blocks (```rust ... ``` or plain ```),
// a JSON object (the whole text, a ```json block, or the first balanced {...} that parses), and
// redaction of a secret from any text the client hands back.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace npuopt::llm {

/// One fenced code block of a Markdown text.
struct FencedBlock {
    std::string language;  ///< first word of the info string, lower-cased ("" for a plain ```)
    std::string code;      ///< the lines between the fences, each ending in '\n'
};

/// Every closed fenced block (``` or ~~~, three or more) in order; an unclosed one is not a block.
std::vector<FencedBlock> fenced_blocks(std::string_view text);

/// The first block tagged `language` (case-insensitive), else the first untagged block; nullopt
/// when there is neither (a block in another language is not taken).
std::optional<std::string> extract_code(std::string_view text, std::string_view language);

/// The first JSON object in `text`: the whole text, else a ```json (or untagged) block, else
/// the first balanced {...} that parses. nullopt when there is none.
std::optional<nlohmann::json> extract_json_object(std::string_view text);

/// `text` with every occurrence of `secret` replaced by "[redacted]" (unchanged when secret is empty).
std::string redact(std::string_view text, std::string_view secret);

}  // namespace npuopt::llm
