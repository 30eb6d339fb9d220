#include "http/body_reader.hpp"

#include <algorithm>
#include <cstring>

namespace sluice::http {

namespace {

// RFC 9110 5.6.2 tchar.
bool is_tchar(unsigned char c) {
    if (c >= '0' && c <= '9') return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
    switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
        return true;
    default:
        return false;
    }
}

int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

bool is_ctl(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

// A chunk size of at most 15 significant hex digits (under 2^60) cannot overflow the
// running total; max_body refuses anything that large long before.
constexpr std::size_t max_size_digits = 15;

}  // namespace

BodyReader BodyReader::length(std::uint64_t n, const BodyLimits& limits) {
    BodyReader r;
    r.mode_ = Mode::length;
    r.limits_ = limits;
    r.remaining_ = n;
    r.state_ = n == 0 ? State::done : State::reading;
    if (n > limits.max_body) r.fail(State::too_large, "body larger than the limit");
    return r;
}

BodyReader BodyReader::chunked(const BodyLimits& limits) {
    BodyReader r;
    r.mode_ = Mode::chunked;
    r.limits_ = limits;
    r.state_ = State::reading;
    return r;
}

BodyReader BodyReader::until_close(const BodyLimits& limits) {
    BodyReader r;
    r.mode_ = Mode::until_close;
    r.limits_ = limits;
    r.state_ = State::reading;
    return r;
}

void BodyReader::fail(State s, std::string_view problem) {
    state_ = s;
    problem_ = problem;
}

std::uint64_t BodyReader::raw_remaining() const {
    if (state_ != State::reading) return 0;
    if (mode_ == Mode::length) return remaining_;
    if (mode_ == Mode::until_close) return UINT64_MAX;
    return 0;
}

void BodyReader::consumed_raw(std::size_t n) {
    if (state_ != State::reading) return;
    total_ += n;
    if (mode_ == Mode::until_close) {
        if (total_ > limits_.max_body) fail(State::too_large, "body larger than the limit");
        return;
    }
    remaining_ -= std::min<std::uint64_t>(n, remaining_);
    if (remaining_ == 0) state_ = State::done;
}

void BodyReader::end_of_input() {
    if (state_ != State::reading) return;
    if (mode_ == Mode::until_close)
        state_ = State::done;
    else
        fail(State::cut_short, "connection closed before the end of the body");
}

BodyReader::Step BodyReader::decode(std::string_view in, std::span<char> out) {
    Step step;
    if (state_ != State::reading) return step;
    switch (mode_) {
    case Mode::none:
        break;
    case Mode::length: {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>({remaining_, in.size(), out.size()}));
        if (n) std::memcpy(out.data(), in.data(), n);
        step.consumed = step.produced = n;
        consumed_raw(n);
        break;
    }
    case Mode::until_close: {
        const auto n = std::min(in.size(), out.size());
        if (total_ + n > limits_.max_body) {
            fail(State::too_large, "body larger than the limit");
            break;
        }
        if (n) std::memcpy(out.data(), in.data(), n);
        step.consumed = step.produced = n;
        total_ += n;
        break;
    }
    case Mode::chunked:
        step.consumed = decode_chunked(in, out, step.produced);
        break;
    }
    return step;
}

std::size_t BodyReader::decode_chunked(std::string_view in, std::span<char> out, std::size_t& produced) {
    std::size_t i = 0;
    produced = 0;
    auto line_byte = [this]() {
        if (++line_bytes_ > limits_.max_chunk_line) {
            fail(State::malformed, "chunk-size line too long");
            return false;
        }
        return true;
    };
    auto trailer_byte = [this]() {
        if (++trailer_bytes_ > limits_.max_trailer_bytes) {
            fail(State::trailer_too_large, "trailer section too large");
            return false;
        }
        return true;
    };
    while (i < in.size() && state_ == State::reading) {
        if (chunk_ == Chunk::data) {
            const auto n = static_cast<std::size_t>(
                std::min<std::uint64_t>({remaining_, in.size() - i, out.size() - produced}));
            if (n == 0) break;  // out is full
            std::memcpy(out.data() + produced, in.data() + i, n);
            i += n;
            produced += n;
            remaining_ -= n;
            if (remaining_ == 0) chunk_ = Chunk::data_cr;
            continue;
        }
        const auto c = static_cast<unsigned char>(in[i]);
        switch (chunk_) {
        case Chunk::size:
            if (!line_byte()) break;
            if (const int v = hex_value(c); v >= 0) {
                if (v != 0 || size_digits_ > 0) ++size_digits_;
                if (size_digits_ > max_size_digits) {
                    fail(State::malformed, "chunk size too large");
                    break;
                }
                remaining_ = remaining_ * 16 + static_cast<unsigned>(v);
                any_digit_ = true;
            } else if (!any_digit_) {
                fail(State::malformed, "invalid chunk size");
            } else if (c == ' ' || c == '\t') {
                chunk_ = Chunk::size_ws;
            } else if (c == ';') {
                chunk_ = Chunk::ext;
            } else if (c == '\r') {
                chunk_ = Chunk::size_lf;
            } else {
                fail(State::malformed, "invalid chunk size");
            }
            break;
        case Chunk::size_ws:
            if (!line_byte()) break;
            if (c == ' ' || c == '\t') break;
            if (c == ';')
                chunk_ = Chunk::ext;
            else if (c == '\r')
                chunk_ = Chunk::size_lf;
            else
                fail(State::malformed, "invalid chunk size");
            break;
        case Chunk::ext:
            // chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
            // Checked byte by byte (never buffered), bounded by max_chunk_line, then dropped.
            if (!line_byte()) break;
            if (in_quote_) {
                if (quote_escape_) {
                    if (is_ctl(c)) fail(State::malformed, "control character in chunk extension");
                    quote_escape_ = false;
                } else if (c == '\\') {
                    quote_escape_ = true;
                } else if (c == '"') {
                    in_quote_ = false;
                } else if (is_ctl(c)) {
                    fail(State::malformed, c == '\r' ? "unterminated quoted string in chunk extension"
                                                     : "control character in chunk extension");
                }
            } else if (c == '\r') {
                chunk_ = Chunk::size_lf;
            } else if (c == '"') {
                in_quote_ = true;
            } else if (!(is_tchar(c) || c == '=' || c == ';' || c == ' ' || c == '\t')) {
                fail(State::malformed, "invalid character in chunk extension");
            }
            break;
        case Chunk::size_lf:
            if (c != '\n') {
                fail(State::malformed, "bare CR in chunk-size line");
                break;
            }
            line_bytes_ = 0;
            size_digits_ = 0;
            any_digit_ = false;
            if (remaining_ == 0) {
                chunk_ = Chunk::trailer_start;
            } else if (remaining_ > limits_.max_body - std::min(limits_.max_body, total_)) {
                fail(State::too_large, "body larger than the limit");
            } else {
                total_ += remaining_;
                chunk_ = Chunk::data;
            }
            break;
        case Chunk::data_cr:
            if (c != '\r') {
                fail(State::malformed, "chunk data longer than its size");
                break;
            }
            chunk_ = Chunk::data_lf;
            break;
        case Chunk::data_lf:
            if (c != '\n') {
                fail(State::malformed, "chunk data not followed by CRLF");
                break;
            }
            chunk_ = Chunk::size;
            break;
        case Chunk::trailer_start:
            if (!trailer_byte()) break;
            if (c == '\r') {
                chunk_ = Chunk::final_lf;
            } else if (c == ' ' || c == '\t') {
                fail(State::malformed, "obs-fold in trailer section");
            } else if (is_tchar(c)) {
                if (++trailer_fields_ > limits_.max_trailer_fields) {
                    fail(State::trailer_too_large, "too many trailer fields");
                    break;
                }
                if (keep_trailers_) kept_trailers_.push_back(static_cast<char>(c));
                chunk_ = Chunk::trailer_line;
                trailer_name_ = true;
                trailer_name_len_ = 1;
            } else {
                fail(State::malformed, "invalid trailer field name");
            }
            break;
        case Chunk::trailer_line:
            if (!trailer_byte()) break;
            if (trailer_name_) {
                if (c == ':')
                    trailer_name_ = false;
                else if (is_tchar(c))
                    ++trailer_name_len_;
                else
                    fail(State::malformed, "invalid trailer field name");
            } else if (c == '\r') {
                chunk_ = Chunk::trailer_lf;
            } else if (is_ctl(c)) {
                fail(State::malformed, "control character in trailer field");
            }
            if (keep_trailers_ && state_ == State::reading) kept_trailers_.push_back(static_cast<char>(c));
            break;
        case Chunk::trailer_lf:
            if (!trailer_byte()) break;
            if (c != '\n') {
                fail(State::malformed, "bare CR in trailer section");
            } else {
                if (keep_trailers_) kept_trailers_.push_back('\n');
                chunk_ = Chunk::trailer_start;
            }
            break;
        case Chunk::final_lf:
            if (!trailer_byte()) break;
            if (c != '\n') {
                fail(State::malformed, "bare CR in trailer section");
                break;
            }
            ++i;
            state_ = State::done;
            return i;
        case Chunk::data:
            break;  // handled above
        }
        if (state_ != State::reading) return i;
        ++i;
    }
    return i;
}

ChunkFrame chunk_frame(std::size_t size) {
    static constexpr char digits[] = "0123456789abcdef";
    ChunkFrame f;
    char tmp[16];
    std::size_t n = 0;
    do {
        tmp[n++] = digits[size & 0xf];
        size >>= 4;
    } while (size);
    while (n) f.head[f.head_size++] = tmp[--n];
    f.head[f.head_size++] = '\r';
    f.head[f.head_size++] = '\n';
    return f;
}

}  // namespace sluice::http
