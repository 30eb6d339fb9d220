#include "auth/json.hpp"

#include <algorithm>

namespace sluice::auth {
namespace {

class Reader {
public:
    Reader(std::string_view text, std::string& error) : text_(text), error_(error) {}

    std::optional<Json> document() {
        auto value = read(0);
        if (!value) return std::nullopt;
        skip_space();
        if (at_ < text_.size()) return fail("text after the value");
        return value;
    }

private:
    std::optional<Json> fail(const std::string& why) {
        if (error_.empty()) error_ = why + " at byte " + std::to_string(at_);
        return std::nullopt;
    }
    void skip_space() {
        while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
            ++at_;
    }
    bool literal(std::string_view word) {
        if (text_.substr(at_, word.size()) != word) return false;
        at_ += word.size();
        return true;
    }

    std::optional<Json> read(std::size_t depth) {
        if (depth > max_json_depth) return fail("nested too deep");
        skip_space();
        if (at_ >= text_.size()) return fail("a value expected");
        Json v;
        const char c = text_[at_];
        if (c == '{') return object(depth);
        if (c == '[') return array(depth);
        if (c == '"') {
            auto s = string();
            if (!s) return std::nullopt;
            v.kind = Json::Kind::string;
            v.text = std::move(*s);
            return v;
        }
        if (literal("true")) {
            v.kind = Json::Kind::boolean;
            v.boolean = true;
            return v;
        }
        if (literal("false")) {
            v.kind = Json::Kind::boolean;
            return v;
        }
        if (literal("null")) return v;
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        return fail("unexpected character");
    }

    std::optional<Json> number() {
        const std::size_t start = at_;
        auto digits = [&] {
            const std::size_t from = at_;
            while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
            return at_ - from;
        };
        if (text_[at_] == '-') ++at_;
        if (at_ < text_.size() && text_[at_] == '0') {
            ++at_;
        } else if (digits() == 0) {
            return fail("a digit expected");
        }
        if (at_ < text_.size() && text_[at_] == '.') {
            ++at_;
            if (digits() == 0) return fail("a digit expected after '.'");
        }
        if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
            ++at_;
            if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
            if (digits() == 0) return fail("a digit expected in the exponent");
        }
        Json v;
        v.kind = Json::Kind::number;
        v.text = std::string(text_.substr(start, at_ - start));
        return v;
    }

    static int hex(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }
    std::optional<unsigned> hex4() {
        if (at_ + 4 > text_.size()) return std::nullopt;
        unsigned n = 0;
        for (int i = 0; i < 4; ++i) {
            const int d = hex(text_[at_ + i]);
            if (d < 0) return std::nullopt;
            n = n * 16 + static_cast<unsigned>(d);
        }
        at_ += 4;
        return n;
    }
    static void append_utf8(std::string& out, unsigned cp) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xe0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else {
            out += static_cast<char>(0xf0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        }
    }

    // A UTF-8 sequence starting at at_ (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
    bool utf8(std::string& out) {
        const auto b0 = static_cast<unsigned char>(text_[at_]);
        std::size_t n = b0 < 0x80 ? 1 : (b0 & 0xe0) == 0xc0 ? 2 : (b0 & 0xf0) == 0xe0 ? 3 : (b0 & 0xf8) == 0xf0 ? 4 : 0;
        if (n == 0 || at_ + n > text_.size()) return false;
        unsigned cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1f) : n == 3 ? (b0 & 0x0f) : (b0 & 0x07);
        for (std::size_t i = 1; i < n; ++i) {
            const auto b = static_cast<unsigned char>(text_[at_ + i]);
            if ((b & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (b & 0x3f);
        }
        static constexpr unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        out.append(text_.substr(at_, n));
        at_ += n;
        return true;
    }

    std::optional<std::string> string() {
        ++at_;  // the opening quote
        std::string out;
        while (true) {
            if (at_ >= text_.size()) {
                fail("unterminated string");
                return std::nullopt;
            }
            const char c = text_[at_];
            if (c == '"') {
                ++at_;
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) {
                fail("a control character in a string");
                return std::nullopt;
            }
            if (c != '\\') {
                if (!utf8(out)) {
                    fail("invalid UTF-8 in a string");
                    return std::nullopt;
                }
                continue;
            }
            ++at_;
            if (at_ >= text_.size()) {
                fail("unterminated escape");
                return std::nullopt;
            }
            const char e = text_[at_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                auto cp = hex4();
                if (!cp) {
                    fail("a bad \\u escape");
                    return std::nullopt;
                }
                if (*cp >= 0xd800 && *cp <= 0xdbff) {
                    // A high surrogate must be followed by a low one.
                    if (!literal("\\u")) {
                        fail("a lone surrogate");
                        return std::nullopt;
                    }
                    auto low = hex4();
                    if (!low || *low < 0xdc00 || *low > 0xdfff) {
                        fail("a lone surrogate");
                        return std::nullopt;
                    }
                    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (*low - 0xdc00);
                } else if (*cp >= 0xdc00 && *cp <= 0xdfff) {
                    fail("a lone surrogate");
                    return std::nullopt;
                }
                append_utf8(out, *cp);
                break;
            }
            default: fail("an unknown escape"); return std::nullopt;
            }
        }
    }

    std::optional<Json> array(std::size_t depth) {
        ++at_;
        Json v;
        v.kind = Json::Kind::array;
        skip_space();
        if (at_ < text_.size() && text_[at_] == ']') {
            ++at_;
            return v;
        }
        while (true) {
            auto item = read(depth + 1);
            if (!item) return std::nullopt;
            if (v.items.size() >= max_json_items) return fail("too many items in an array");
            v.items.push_back(std::move(*item));
            skip_space();
            if (at_ < text_.size() && text_[at_] == ',') {
                ++at_;
                continue;
            }
            if (at_ < text_.size() && text_[at_] == ']') {
                ++at_;
                return v;
            }
            return fail("',' or ']' expected");
        }
    }

    std::optional<Json> object(std::size_t depth) {
        ++at_;
        Json v;
        v.kind = Json::Kind::object;
        skip_space();
        if (at_ < text_.size() && text_[at_] == '}') {
            ++at_;
            return v;
        }
        while (true) {
            skip_space();
            if (at_ >= text_.size() || text_[at_] != '"') return fail("a member name expected");
            auto name = string();
            if (!name) return std::nullopt;
            // A name given twice: which one a reader takes differs between libraries (the
            // JWT "alg" or a claim could be read two ways), so it is refused.
            if (v.members.size() >= max_json_items) return fail("too many members in an object");
            if (std::any_of(v.members.begin(), v.members.end(), [&](const auto& m) { return m.first == *name; }))
                return fail("the member name \"" + *name + "\" is repeated");
            skip_space();
            if (at_ >= text_.size() || text_[at_] != ':') return fail("':' expected");
            ++at_;
            auto value = read(depth + 1);
            if (!value) return std::nullopt;
            v.members.push_back(JsonMember{std::move(*name), std::move(*value)});
            skip_space();
            if (at_ < text_.size() && text_[at_] == ',') {
                ++at_;
                continue;
            }
            if (at_ < text_.size() && text_[at_] == '}') {
                ++at_;
                return v;
            }
            return fail("',' or '}' expected");
        }
    }

    std::string_view text_;
    std::string& error_;
    std::size_t at_ = 0;
};

}  // namespace

const Json* Json::member(std::string_view name) const {
    for (const auto& [n, v] : members)
        if (n == name) return &v;
    return nullptr;
}

std::optional<std::string_view> Json::string_member(std::string_view name) const {
    const Json* v = member(name);
    if (!v || v->kind != Kind::string) return std::nullopt;
    return v->text;
}

std::optional<Json> parse_json(std::string_view text, std::string& error) {
    error.clear();
    return Reader(text, error).document();
}

}  // namespace sluice::auth
