#include "http/field_list.hpp"

#include "http/field_text.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace sluice::http {
namespace bhttp = boost::beast::http;

void FieldList::insert(bhttp::field name, std::string_view value) {
    const auto spelled = bhttp::to_string(name);  // static storage
    lines_.emplace_back(name, std::string_view(spelled.data(), spelled.size()), keep(value));
}

void FieldList::insert(std::string_view name, std::string_view value) {
    lines_.emplace_back(field_id(name), keep(name), keep(value));
}

namespace {

// A name as last spelled, and Beast's code for it. Plain data: thread_local storage starts
// zeroed (size 0: empty) and needs no initialisation on first use.
struct RememberedName {
    std::uint8_t size;
    bhttp::field id;
    char bytes[27];
};
// 128 sets of two (8 KiB a thread): the names a browser's request and an upstream's response
// carry (some 30) fit without two of them taking turns in one place.
constexpr std::size_t name_sets = 128;
struct NameSet {
    RememberedName way[2];  // way[0] the one remembered last
};
thread_local NameSet remembered[name_sets];
thread_local std::uint64_t looked_up = 0;

// Whether the n bytes (1 to 27) at a and b are equal: words compared, the last one where the
// string ends (overlapping), none read past either end.
bool same_bytes(const char* a, const char* b, std::size_t n) {
    const auto word = [](const char* p) {
        std::uint64_t x;
        std::memcpy(&x, p, 8);
        return x;
    };
    const auto half = [](const char* p) {
        std::uint32_t x;
        std::memcpy(&x, p, 4);
        return x;
    };
    if (n < 4) {
        for (std::size_t i = 0; i < n; ++i)
            if (a[i] != b[i]) return false;
        return true;
    }
    if (n < 8) return half(a) == half(b) && half(a + n - 4) == half(b + n - 4);
    for (std::size_t i = 0; i + 8 < n; i += 8)
        if (word(a + i) != word(b + i)) return false;
    return word(a + n - 8) == word(b + n - 8);
}

// The set of a name of n bytes (1 to 27): its first and last eight bytes (or four, or the
// bytes themselves) and its length, mixed by multiplication; the top bits choose.
std::size_t name_set(const char* p, std::size_t n) {
    std::uint64_t a = 0, b = 0;
    if (n >= 8) {
        std::memcpy(&a, p, 8);
        std::memcpy(&b, p + n - 8, 8);
    } else if (n >= 4) {
        std::uint32_t x, y;
        std::memcpy(&x, p, 4);
        std::memcpy(&y, p + n - 4, 4);
        a = x;
        b = y;
    } else {
        a = static_cast<unsigned char>(p[0]);
        b = static_cast<std::uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8 | static_cast<unsigned char>(p[n - 1]);
    }
    const std::uint64_t h = ((a * 0x9E3779B97F4A7C15ull) ^ b ^ n) * 0xC2B2AE3D27D4EB4Full;
    return static_cast<std::size_t>(h >> 57);  // (7 bits: name_sets)
}

// A name not remembered (or too long to be): looked up, and remembered when it fits, in place
// of the set's older one.
[[gnu::noinline]] bhttp::field look_up_field(std::string_view name, NameSet* set) {
    ++looked_up;
    const auto id = bhttp::string_to_field(boost::beast::string_view(name.data(), name.size()));
    if (set) {
        set->way[1] = set->way[0];
        auto& slot = set->way[0];
        slot.size = static_cast<std::uint8_t>(name.size());
        slot.id = id;
        std::memcpy(slot.bytes, name.data(), name.size());
    }
    return id;
}

}  // namespace

bhttp::field field_id(std::string_view name) {
    const std::size_t n = name.size();
    if (n == 0 || n > sizeof(RememberedName::bytes)) return look_up_field(name, nullptr);
    auto& set = remembered[name_set(name.data(), n)];
    for (const auto& slot : set.way)
        if (slot.size == n && same_bytes(slot.bytes, name.data(), n)) return slot.id;
    return look_up_field(name, &set);
}

std::uint64_t field_ids_looked_up() { return looked_up; }

void FieldList::clear() {
    lines_.clear();
    if (blocks_.size() > 1) blocks_.resize(1);
    next_ = blocks_.empty() ? nullptr : blocks_.front().get();
    room_ = blocks_.empty() ? 0 : first_block_size_;
}

std::string_view FieldList::keep(std::string_view s) {
    if (s.empty()) return {};
    if (s.size() > room_) {
        // A head and the few fields added to it usually fit the first block.
        const std::size_t size = std::max<std::size_t>(s.size() + 256, 1024);
        blocks_.push_back(std::unique_ptr<char[]>(new char[size]));
        if (blocks_.size() == 1) first_block_size_ = size;
        next_ = blocks_.back().get();
        room_ = size;
    }
    std::memcpy(next_, s.data(), s.size());
    const std::string_view kept(next_, s.size());
    next_ += s.size();
    room_ -= s.size();
    return kept;
}

namespace {

// tchar (RFC 9110 5.6.2): the bytes of a field name.
constexpr std::array<bool, 256> token_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = true;
    for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = true;
    for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = true;
    for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
    return t;
}();

// Bytes of a reason phrase or a field value: visible ASCII, space, tab and obs-text; not the
// other control bytes (a CR that is not part of the line's end among them) nor DEL.
constexpr std::array<bool, 256> value_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0x20; c < 256; ++c) t[static_cast<std::size_t>(c)] = c != 0x7f;
    t['\t'] = true;
    return t;
}();

// Eight bytes at a time: a word with no byte below 0x20 and none equal to 0x7f is plain as it
// is (most words of most heads); one with such a byte (a tab, usually) is looked at byte by
// byte. A string of 8 bytes or more ends with its last 8 (read again where they overlap).
[[gnu::always_inline]] inline bool plain_bytes_of_word(const char* p) {
    if (plain_word(p)) return true;
    for (int j = 0; j < 8; ++j)
        if (!value_bytes[static_cast<unsigned char>(p[j])]) return false;
    return true;
}

bool plain(std::string_view s) {
    const std::size_t n = s.size();
    if (n < 8) {
        for (char c : s)
            if (!value_bytes[static_cast<unsigned char>(c)]) return false;
        return true;
    }
    for (std::size_t i = 0; i + 8 <= n; i += 8)
        if (!plain_bytes_of_word(s.data() + i)) return false;
    return n % 8 == 0 || plain_bytes_of_word(s.data() + n - 8);
}

constexpr std::string_view malformed_head = "upstream sent a malformed response head";

bool digit(char c) { return c >= '0' && c <= '9'; }

// Whether the comma-separated elements of a Connection value include close and keep-alive
// (case-insensitively), in one walk.
void connection_options(std::string_view list, bool& close, bool& keep_alive) {
    while (!list.empty()) {
        const auto comma = list.find(',');
        const auto element = trim_ows(list.substr(0, comma));
        close = close || iequals_ascii(element, "close");
        keep_alive = keep_alive || iequals_ascii(element, "keep-alive");
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
}

constexpr std::string_view invalid_head = "upstream sent an invalid response head";

// Beast's list grammar for Connection, Content-Length and Transfer-Encoding values (its
// token_list and opt_token_list): tokens separated by commas, optional whitespace around
// them, empty elements allowed. `each` gets the tokens in order up to the end or the first
// byte that breaks the grammar; returns whether the whole value kept to it.
template <class F>
bool walk_token_list(std::string_view v, F&& each) {
    bool need_comma = false;
    std::size_t i = 0;
    while (i < v.size()) {
        const char c = v[i];
        if (c == ' ' || c == '\t') {
            ++i;
        } else if (token_bytes[static_cast<unsigned char>(c)]) {
            if (need_comma) return false;
            const std::size_t start = i;
            while (i < v.size() && token_bytes[static_cast<unsigned char>(v[i])]) ++i;
            each(v.substr(start, i - start));
            need_comma = true;
        } else if (c == ',') {
            need_comma = false;
            ++i;
        } else {
            return false;
        }
    }
    return true;
}

// A decimal number that fits 64 bits (Beast's parse_dec).
bool decimal(std::string_view s, std::uint64_t& out) {
    if (s.empty()) return false;
    std::uint64_t v = 0;
    for (const char c : s) {
        if (!digit(c) || v > UINT64_MAX / 10) return false;
        const auto d = static_cast<std::uint64_t>(c - '0');
        if (UINT64_MAX - v * 10 < d) return false;
        v = v * 10 + d;
    }
    out = v;
    return true;
}

// The request line's parts: a method (a token), SP, a target (visible bytes and obs-text), SP.
constexpr std::array<bool, 256> target_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0x21; c < 256; ++c) t[static_cast<std::size_t>(c)] = c != 0x7f;
    return t;
}();

constexpr std::string_view invalid_request = "malformed request head";

}  // namespace

std::optional<std::string_view> ClientRequest::find(bhttp::field name) const {
    for (const auto& f : fields_)
        if (f.name() == name) return f.value();
    return std::nullopt;
}

std::optional<std::string_view> ClientRequest::find(std::string_view name) const {
    const auto id = field_id(name);
    for (const auto& f : fields_)
        if (field_named(f.name(), f.name_string(), id, name)) return f.value();
    return std::nullopt;
}

std::string_view parse_request_head(std::string_view head, ClientRequest& out) {
    out.fields_.clear();
    out.method_ = bhttp::verb::unknown;
    out.method_string_ = {};
    out.target_ = {};
    out.version_ = 11;
    out.keep_alive_ = false;
    if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return invalid_request;
    const std::string_view data = out.fields_.keep(head);
    const char* const bytes = data.data();
    const std::size_t n = data.size();
    out.fields_.reserve(16);

    // request-line = method SP request-target SP HTTP-version CRLF
    std::size_t i = 0;
    while (i < n && token_bytes[static_cast<unsigned char>(bytes[i])]) ++i;
    if (i == 0 || i == n || bytes[i] != ' ') return "invalid method";
    out.method_string_ = std::string_view(bytes, i);
    const std::size_t target_start = ++i;
    while (i < n && target_bytes[static_cast<unsigned char>(bytes[i])]) ++i;
    if (i == target_start || i == n || bytes[i] != ' ') return "invalid request target";
    out.target_ = std::string_view(bytes + target_start, i - target_start);
    ++i;
    if (n - i < 10 || std::string_view(bytes + i, 5) != "HTTP/" || !digit(bytes[i + 5]) || bytes[i + 6] != '.' ||
        !digit(bytes[i + 7]))
        return "invalid HTTP version";
    const unsigned version = static_cast<unsigned>((bytes[i + 5] - '0') * 10 + (bytes[i + 7] - '0'));
    if (version != 10 && version != 11) return "invalid HTTP version";
    if (bytes[i + 8] != '\r' || bytes[i + 9] != '\n') return "invalid HTTP version";
    out.version_ = version;
    out.method_ = bhttp::string_to_verb(boost::beast::string_view(out.method_string_.data(), out.method_string_.size()));
    std::size_t pos = i + 10;

    bool close = false;
    bool keep_alive = false;
    bool has_length = false;  // a Content-Length was read (Beast's flagContentLength)
    std::uint64_t length = 0;
    bool chunked = false;     // a Transfer-Encoding ended in chunked (Beast's flagChunked)
    // A field line in one pass: its name (tokens) up to the colon, then its value eight bytes
    // at a time up to the first control byte, which must be the CR of CRLF (a tab is looked
    // past). Every loop stops within the head: it ends in CRLF CRLF, and neither CR is a
    // token or value byte.
    const auto at = [bytes](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
    while (true) {
        std::size_t k = pos;
        while (token_bytes[at(k)]) ++k;
        if (k == pos) {
            if (bytes[k] == '\r' && bytes[k + 1] == '\n') {  // the blank line
                pos = k + 2;
                break;
            }
            if (bytes[k] == '\n') return "bare LF in request head";
            if ((bytes[k] == ' ' || bytes[k] == '\t') && !out.fields_.empty())
                return "obs-fold (line folding) in header field";
            return "invalid header field name";
        }
        if (bytes[k] != ':') return bytes[k] == '\n' ? "bare LF in request head" : "invalid header field name";
        const std::string_view name(bytes + pos, k - pos);
        const std::size_t value_start = ++k;
        for (;;) {
            while (k + 8 <= n && plain_word(bytes + k)) k += 8;
            if (!value_bytes[at(k)]) break;
            ++k;
        }
        if (bytes[k] != '\r') return bytes[k] == '\n' ? "bare LF in request head" : "invalid header field value";
        if (bytes[k + 1] != '\n') return "invalid header field value";  // a bare CR
        const std::string_view value = trim_ows(std::string_view(bytes + value_start, k - value_start));
        pos = k + 2;
        const auto id = field_id(name);
        switch (id) {
        case bhttp::field::connection:
        case bhttp::field::proxy_connection: {
            bool says_close = false, says_keep_alive = false;
            if (!walk_token_list(value, [&](std::string_view t) {
                    says_close = says_close || iequals_ascii(t, "close");
                    says_keep_alive = says_keep_alive || iequals_ascii(t, "keep-alive");
                }))
                return "invalid Connection value";
            if (id == bhttp::field::connection) {
                close = close || says_close;
                keep_alive = keep_alive || says_keep_alive;
            }
            break;
        }
        case bhttp::field::content_length: {
            if (chunked) return "Content-Length together with Transfer-Encoding";
            std::size_t elements = 1 + static_cast<std::size_t>(std::count(value.begin(), value.end(), ','));
            std::size_t numbers = 0;
            bool fine = true, differ = false;
            const bool list = walk_token_list(value, [&](std::string_view t) {
                std::uint64_t v = 0;
                if (!fine || differ) return;
                if (!decimal(t, v)) {
                    fine = false;
                    return;
                }
                ++numbers;
                differ = has_length && v != length;
                has_length = true;
                length = v;
            });
            if (differ) return "Content-Length values differ";
            if (!list || !fine || numbers == 0 || numbers != elements) return "invalid Content-Length";
            break;
        }
        case bhttp::field::transfer_encoding: {
            if (chunked) return "Transfer-Encoding applies chunked more than once";
            if (has_length) return "Content-Length together with Transfer-Encoding";
            // As Beast: chunked when its first "chunked" is the last coding read (a list
            // broken by a stray byte ends there).
            std::size_t codings = 0, first_chunked = 0;
            walk_token_list(value, [&](std::string_view t) {
                ++codings;
                if (first_chunked == 0 && iequals_ascii(t, "chunked")) first_chunked = codings;
            });
            chunked = first_chunked != 0 && first_chunked == codings;
            break;
        }
        default:
            break;
        }
        out.fields_.insert_kept(id, name, value);
    }
    if (pos != n) return invalid_request;  // bytes after the blank line: not one head
    out.keep_alive_ = version >= 11 ? !close : keep_alive && !close;
    return {};
}

std::string_view parse_response_head(std::string_view head, UpstreamResponse& out, std::size_t max_fields) {
    out.fields.clear();
    out.reason = {};
    out.status = 0;
    out.version = 11;
    out.keep_alive = false;
    if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return invalid_head;
    const std::string_view data = out.fields.keep(head);
    const char* const bytes = data.data();
    out.fields.reserve(16);

    // status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF
    auto eol = data.find("\r\n");
    const std::string_view line(bytes, eol);
    if (line.size() < 13 || !line.starts_with("HTTP/") || !digit(line[5]) || line[6] != '.' || !digit(line[7]) ||
        line[8] != ' ' || !digit(line[9]) || !digit(line[10]) || !digit(line[11]) || line[12] != ' ')
        return invalid_head;
    if (line[5] != '1') return "upstream answered with an HTTP version other than 1.x";
    out.version = line[7] == '0' ? 10 : 11;
    out.status = static_cast<unsigned>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));
    if (out.status < 100 || out.status > 599) return "upstream sent an invalid status code";
    out.reason = std::string_view(bytes + 13, line.size() - 13);
    if (!plain(out.reason)) return malformed_head;

    bool close = false;
    bool keep_alive = false;
    std::size_t pos = eol + 2;
    while (true) {
        // Lines end in CRLF: the LF found, the CR checked (any bytes may come here).
        const auto* lf = static_cast<const char*>(std::memchr(bytes + pos, '\n', data.size() - pos));
        if (lf == nullptr) return invalid_head;  // (the head ends in CRLF CRLF)
        eol = static_cast<std::size_t>(lf - bytes);
        if (eol == pos || bytes[eol - 1] != '\r') return invalid_head;  // a bare LF
        --eol;
        if (eol == pos) {  // the blank line
            pos += 2;
            break;
        }
        const char* const field = bytes + pos;
        const std::size_t field_size = eol - pos;
        pos = eol + 2;
        std::size_t colon = 0;
        while (colon < field_size && token_bytes[static_cast<unsigned char>(field[colon])]) ++colon;
        if (colon == 0 || colon == field_size || field[colon] != ':') return invalid_head;
        const std::string_view name(field, colon);
        const std::string_view raw_value(field + colon + 1, field_size - colon - 1);
        if (!plain(raw_value)) return malformed_head;
        const std::string_view value = trim_ows(raw_value);
        const auto id = field_id(name);
        // Beast's parser read Proxy-Connection as Connection for this (a server that says
        // close there is not kept either).
        if (id == bhttp::field::connection || id == bhttp::field::proxy_connection) {
            connection_options(value, close, keep_alive);
        }
        if (out.fields.size() == max_fields) return "upstream response has too many header fields";
        out.fields.insert_kept(id, name, value);
    }
    if (pos != data.size()) return invalid_head;  // bytes after the blank line: not one head
    // As Beast's parser: HTTP/1.1 unless Connection says close; HTTP/1.0 only when it says
    // keep-alive (and not close too).
    out.keep_alive = out.version >= 11 ? !close : keep_alive && !close;
    return {};
}

}  // namespace sluice::http
