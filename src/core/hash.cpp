#include "core/hash.hpp"

namespace npuopt {
namespace {

constexpr std::array<std::uint32_t, 64> k_round_constants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t value, int bits) {
    return (value >> bits) | (value << (32 - bits));
}

}  // namespace

Sha256::Sha256()
    : m_state{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
              0x5be0cd19} {}

void Sha256::process_block(const std::uint8_t* block) {
    std::array<std::uint32_t, 64> words{};
    for (int word_idx = 0; word_idx < 16; ++word_idx) {
        words[word_idx] = (std::uint32_t{block[word_idx * 4]} << 24) |
                          (std::uint32_t{block[word_idx * 4 + 1]} << 16) |
                          (std::uint32_t{block[word_idx * 4 + 2]} << 8) |
                          std::uint32_t{block[word_idx * 4 + 3]};
    }
    for (int word_idx = 16; word_idx < 64; ++word_idx) {
        std::uint32_t s0 = rotr(words[word_idx - 15], 7) ^ rotr(words[word_idx - 15], 18) ^
                           (words[word_idx - 15] >> 3);
        std::uint32_t s1 = rotr(words[word_idx - 2], 17) ^ rotr(words[word_idx - 2], 19) ^
                           (words[word_idx - 2] >> 10);
        words[word_idx] = words[word_idx - 16] + s0 + words[word_idx - 7] + s1;
    }
    auto [a, b, c, d, e, f, g, h] = m_state;
    for (int round_idx = 0; round_idx < 64; ++round_idx) {
        std::uint32_t sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        std::uint32_t choose = (e & f) ^ (~e & g);
        std::uint32_t temp1 = h + sum1 + choose + k_round_constants[round_idx] + words[round_idx];
        std::uint32_t sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
        std::uint32_t temp2 = sum0 + majority;
        h = g;
        g = f;
        f = e;
        e = d + temp1;
        d = c;
        c = b;
        b = a;
        a = temp1 + temp2;
    }
    m_state[0] += a;
    m_state[1] += b;
    m_state[2] += c;
    m_state[3] += d;
    m_state[4] += e;
    m_state[5] += f;
    m_state[6] += g;
    m_state[7] += h;
}

void Sha256::update(std::string_view bytes) {
    m_total_bytes += bytes.size();
    for (char byte : bytes) {
        m_buffer[m_buffer_len++] = static_cast<std::uint8_t>(byte);
        if (m_buffer_len == 64) {
            process_block(m_buffer.data());
            m_buffer_len = 0;
        }
    }
}

std::array<std::uint8_t, 32> Sha256::finish() {
    std::uint64_t total_bits = m_total_bytes * 8;
    m_buffer[m_buffer_len++] = 0x80;
    if (m_buffer_len > 56) {
        while (m_buffer_len < 64) m_buffer[m_buffer_len++] = 0;
        process_block(m_buffer.data());
        m_buffer_len = 0;
    }
    while (m_buffer_len < 56) m_buffer[m_buffer_len++] = 0;
    for (int byte_idx = 7; byte_idx >= 0; --byte_idx) {
        m_buffer[m_buffer_len++] = static_cast<std::uint8_t>(total_bits >> (byte_idx * 8));
    }
    process_block(m_buffer.data());
    std::array<std::uint8_t, 32> digest{};
    for (int word_idx = 0; word_idx < 8; ++word_idx) {
        for (int byte_idx = 0; byte_idx < 4; ++byte_idx) {
            digest[word_idx * 4 + byte_idx] =
                static_cast<std::uint8_t>(m_state[word_idx] >> (24 - byte_idx * 8));
        }
    }
    return digest;
}

std::string sha256_hex(std::string_view bytes) {
    Sha256 hasher;
    hasher.update(bytes);
    static constexpr char k_hex_digits[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(64);
    for (std::uint8_t byte : hasher.finish()) {
        hex.push_back(k_hex_digits[byte >> 4]);
        hex.push_back(k_hex_digits[byte & 0x0f]);
    }
    return hex;
}

std::string content_hash(std::string_view bytes) { return sha256_hex(bytes); }

}  // namespace npuopt
