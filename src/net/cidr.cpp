#include "net/cidr.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace sluice::net {
namespace {

constexpr std::size_t v4_offset = 12;  // IPv4 lives in the last 4 bytes of ::ffff:a.b.c.d
constexpr std::size_t max_address_text = 64;

std::string_view without_brackets(std::string_view text, bool& bracketed) {
    bracketed = text.size() >= 2 && text.front() == '[' && text.back() == ']';
    return bracketed ? text.substr(1, text.size() - 2) : text;
}

// Dotted decimal as inet_pton reads it: four parts of 1 to 3 digits, each at most 255, no
// leading zero (inet_aton's octal and short forms are not addresses here). Read in place:
// every request of a trusted proxy's client parses its peer and its X-Forwarded-For entries.
std::optional<IpAddress> parse_v4(std::string_view text) {
    IpAddress address;
    address.v4 = true;
    address.bytes[10] = 0xff;
    address.bytes[11] = 0xff;
    std::size_t at = 0;
    for (std::size_t part = 0; part < 4; ++part) {
        if (part > 0) {
            if (at >= text.size() || text[at] != '.') return std::nullopt;
            ++at;
        }
        unsigned value = 0;
        std::size_t digits = 0;
        while (at < text.size() && text[at] >= '0' && text[at] <= '9' && digits < 4) {
            value = value * 10 + static_cast<unsigned>(text[at] - '0');
            ++at;
            ++digits;
        }
        if (digits == 0 || digits > 3 || value > 255 || (digits > 1 && text[at - digits] == '0')) return std::nullopt;
        address.bytes[v4_offset + part] = static_cast<std::uint8_t>(value);
    }
    if (at != text.size()) return std::nullopt;
    return address;
}

std::optional<IpAddress> parse_v6(const std::string& text) {
    in6_addr raw{};
    if (inet_pton(AF_INET6, text.c_str(), &raw) != 1) return std::nullopt;
    IpAddress address;
    const auto* octets = reinterpret_cast<const std::uint8_t*>(&raw);
    for (std::size_t i = 0; i < 16; ++i) address.bytes[i] = octets[i];
    return address;
}

bool is_v4_mapped(const std::array<std::uint8_t, 16>& bytes) {
    for (std::size_t i = 0; i < 10; ++i)
        if (bytes[i] != 0) return false;
    return bytes[10] == 0xff && bytes[11] == 0xff;
}

// An octet in decimal, without leading zeros, at `out`; returns the end. (snprintf costs
// about 1,700 instructions per address, and every request of a trusted proxy's client
// formats one: client_ip.)
char* put_decimal(std::uint8_t octet, char* out) {
    if (octet >= 100) *out++ = static_cast<char>('0' + octet / 100);
    if (octet >= 10) *out++ = static_cast<char>('0' + octet / 10 % 10);
    *out++ = static_cast<char>('0' + octet % 10);
    return out;
}

std::string dotted_quad(const std::array<std::uint8_t, 16>& bytes) {
    char text[16];
    char* end = text;
    for (std::size_t i = v4_offset; i < 16; ++i) {
        if (i > v4_offset) *end++ = '.';
        end = put_decimal(bytes[i], end);
    }
    return std::string(text, end);
}

// A group in lower-case hexadecimal without leading zeros (RFC 5952 4.1).
void append_hex_group(unsigned group, std::string& out) {
    static constexpr char digits[] = "0123456789abcdef";
    bool started = false;
    for (int shift = 12; shift >= 0; shift -= 4) {
        const unsigned digit = (group >> shift) & 0xf;
        if (digit == 0 && !started && shift > 0) continue;
        started = true;
        out += digits[digit];
    }
}

// The longest run of two or more zero groups (the first one on a tie), as RFC 5952 asks.
struct ZeroRun {
    int start = -1;
    int length = 0;
};

ZeroRun longest_zero_run(const std::array<unsigned, 8>& groups) {
    ZeroRun best;
    for (int i = 0; i < 8;) {
        if (groups[i] != 0) {
            ++i;
            continue;
        }
        int end = i;
        while (end < 8 && groups[end] == 0) ++end;
        if (end - i >= 2 && end - i > best.length) best = {i, end - i};
        i = end;
    }
    return best;
}

std::string v6_text(const std::array<std::uint8_t, 16>& bytes) {
    if (is_v4_mapped(bytes)) return "::ffff:" + dotted_quad(bytes);
    std::array<unsigned, 8> groups{};
    for (std::size_t i = 0; i < 8; ++i) groups[i] = (unsigned{bytes[2 * i]} << 8) | bytes[2 * i + 1];
    const ZeroRun run = longest_zero_run(groups);
    std::string text;
    for (int i = 0; i < 8; ++i) {
        if (i == run.start) {
            text += "::";
            i += run.length - 1;
            continue;
        }
        if (!text.empty() && text.back() != ':') text += ':';
        append_hex_group(groups[i], text);
    }
    return text;
}

std::optional<unsigned> parse_prefix_length(std::string_view text) {
    if (text.empty() || text.size() > 3) return std::nullopt;
    unsigned value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    return value;
}

// Compares the first `bits` bits of two addresses.
// The whole bytes compared at once, then the last byte's leading bits (a byte at a time took
// about 110 instructions for an IPv4 /32, and a trusted proxy's requests compare two or more).
bool same_leading_bits(const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b,
                       unsigned bits) {
    if (bits > 128) bits = 128;
    const std::size_t whole = bits / 8;
    if (std::memcmp(a.data(), b.data(), whole) != 0) return false;
    const unsigned rest = bits % 8;
    if (rest == 0) return true;
    const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

void clear_bits_after(std::array<std::uint8_t, 16>& bytes, unsigned bits) {
    for (std::size_t byte = 0; byte < bytes.size(); ++byte) {
        const unsigned first_bit = static_cast<unsigned>(byte) * 8;
        if (first_bit >= bits) {
            bytes[byte] = 0;
        } else if (bits - first_bit < 8) {
            bytes[byte] &= static_cast<std::uint8_t>(0xff << (8 - (bits - first_bit)));
        }
    }
}

unsigned bits_in_bytes(const Cidr& cidr) { return cidr.base.v4 ? cidr.prefix + 96 : cidr.prefix; }

}  // namespace

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
    bool bracketed = false;
    const std::string_view inner = without_brackets(text, bracketed);
    if (inner.empty() || inner.size() > max_address_text) return std::nullopt;
    if (inner.find('\0') != std::string_view::npos) return std::nullopt;
    if (inner.find(':') != std::string_view::npos) return parse_v6(std::string(inner));
    if (bracketed) return std::nullopt;  // "[1.2.3.4]" is not a valid form
    return parse_v4(inner);
}

std::string IpAddress::str() const { return v4 ? dotted_quad(bytes) : v6_text(bytes); }

IpAddress IpAddress::unmapped() const {
    static constexpr std::uint8_t prefix[v4_offset] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    IpAddress out = *this;
    if (!v4 && std::equal(std::begin(prefix), std::end(prefix), bytes.begin())) out.v4 = true;
    return out;
}

std::optional<Cidr> Cidr::parse(std::string_view text) {
    const auto slash = text.find('/');
    auto base = IpAddress::parse(text.substr(0, slash));
    if (!base) return std::nullopt;
    const unsigned max_prefix = base->v4 ? 32 : 128;
    unsigned prefix = max_prefix;
    if (slash != std::string_view::npos) {
        const auto parsed = parse_prefix_length(text.substr(slash + 1));
        if (!parsed || *parsed > max_prefix) return std::nullopt;
        prefix = *parsed;
    }
    Cidr cidr{*base, prefix};
    clear_bits_after(cidr.base.bytes, bits_in_bytes(cidr));
    return cidr;
}

bool Cidr::contains(const IpAddress& ip) const {
    return same_leading_bits(base.bytes, ip.bytes, bits_in_bytes(*this));
}

std::string Cidr::str() const { return base.str() + "/" + std::to_string(prefix); }

}  // namespace sluice::net
