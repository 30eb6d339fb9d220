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
constexpr std::size_t remembered_names = 128;  // 4 KiB a thread
thread_local RememberedName remembered[remembered_names];

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

// A name not remembered (or too long to be): looked up, and remembered when it fits.
[[gnu::noinline]] bhttp::field look_up_field(std::string_view name, RememberedName* slot) {
    const auto id = bhttp::string_to_field(boost::beast::string_view(name.data(), name.size()));
    if (slot) {
        slot->size = static_cast<std::uint8_t>(name.size());
        slot->id = id;
        std::memcpy(slot->bytes, name.data(), name.size());
    }
    return id;
}

}  // namespace

bhttp::field field_id(std::string_view name) {
    const std::size_t n = name.size();
    if (n == 0 || n > sizeof(RememberedName::bytes)) return look_up_field(name, nullptr);
    const auto byte = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(name[i])); };
    auto& slot = remembered[(n * 31 + byte(0) * 7 + byte(n / 2) * 3 + byte(n - 1)) % remembered_names];
    if (slot.size == n && same_bytes(slot.bytes, name.data(), n)) return slot.id;
    return look_up_field(name, &slot);
}

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

}  // namespace

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
