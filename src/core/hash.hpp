#pragma once
// Content hashes: SHA-256 (FIPS 180-4), self-contained, for design and bench-config keys.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace npuopt {

/// Incremental SHA-256; feed bytes with update(), read the digest once with finish().
class Sha256 {
public:
    Sha256();
    void update(std::string_view bytes);
    std::array<std::uint8_t, 32> finish();

private:
    void process_block(const std::uint8_t* block);
    std::array<std::uint32_t, 8> m_state;
    std::array<std::uint8_t, 64> m_buffer{};
    std::size_t m_buffer_len = 0;
    std::uint64_t m_total_bytes = 0;
};

/// Lowercase hex SHA-256 of `bytes` (64 characters).
std::string sha256_hex(std::string_view bytes);

/// Content hash used as a record key (designs, bench configs): sha256_hex of the bytes.
std::string content_hash(std::string_view bytes);

}  // namespace npuopt
