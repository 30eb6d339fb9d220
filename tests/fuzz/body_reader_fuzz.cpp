// libFuzzer target: the body reader (src/http/body_reader.cpp), chunked and Content-Length.
// Sources: src/http/body_reader.cpp
//
// The first input byte picks the mode and limits, the next ones how the rest is split into
// pieces and how large the output buffer is; the rest is the body's bytes. Checked:
// - decoding in pieces, through any output size, gives the same state, body and consumed
//   count as decoding all at once (no state leaks across calls, nothing lost or repeated;
//   a body that fails is refused whole, so only its state is compared);
// - nothing past the end of the body is consumed;
// - a chunked body that decodes fully decodes to the same bytes after sluice frames it again
//   (chunk_frame + data + CRLF + last chunk), with nothing left over.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http/body_reader.hpp"

using sluice::http::BodyLimits;
using sluice::http::BodyReader;

namespace {

struct Result {
    BodyReader::State state;
    std::string body;
    std::size_t consumed = 0;
};

Result decode(BodyReader reader, std::string_view in, const std::vector<std::size_t>& pieces, std::size_t out_size) {
    Result r;
    std::vector<char> out(out_size);
    std::size_t offset = 0, avail = 0, next_piece = 0;
    while (reader.state() == BodyReader::State::reading) {
        if (offset == avail) {
            if (avail == in.size()) break;
            const std::size_t piece = pieces.empty() ? in.size() : pieces[next_piece++ % pieces.size()];
            avail = std::min(in.size(), avail + piece);
        }
        const auto step = reader.decode(in.substr(offset, avail - offset), out);
        if (step.consumed > avail - offset || step.produced > out.size()) __builtin_trap();
        r.body.append(out.data(), step.produced);
        offset += step.consumed;
        if (step.consumed == 0 && step.produced == 0 && reader.state() == BodyReader::State::reading &&
            offset != avail)
            __builtin_trap();  // stuck: input left, room left, no progress
    }
    r.state = reader.state();
    r.consumed = offset;
    return r;
}

BodyReader make(std::uint8_t mode, std::uint64_t length, const BodyLimits& limits) {
    switch (mode % 3) {
    case 0: return BodyReader::chunked(limits);
    case 1: return BodyReader::length(length, limits);
    default: return BodyReader::until_close(limits);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 4) return 0;
    const std::uint8_t mode = data[0];
    BodyLimits limits;
    limits.max_body = (data[1] & 0x80) ? 64 : 1 << 20;
    limits.max_chunk_line = (data[1] & 0x40) ? 8 : 4096;
    limits.max_trailer_bytes = (data[1] & 0x20) ? 16 : 16384;
    limits.max_trailer_fields = (data[1] & 0x10) ? 1 : 100;
    const std::uint64_t length = data[2];
    std::vector<std::size_t> pieces;
    for (int i = 0; i < 4; ++i) pieces.push_back(1 + ((data[3] >> (2 * i)) & 3) * 3);
    const std::size_t out_size = 1 + (data[3] & 0x0f);
    const std::string_view in(reinterpret_cast<const char*>(data) + 4, size - 4);

    const Result whole = decode(make(mode, length, limits), in, {}, 64 * 1024);
    const Result split = decode(make(mode, length, limits), in, pieces, out_size);
    if (whole.state != split.state) __builtin_trap();
    // A body that failed is refused whole: how much of it was decoded before does not matter.
    const bool failed = whole.state != BodyReader::State::done && whole.state != BodyReader::State::reading;
    if (!failed && whole.body != split.body) __builtin_trap();
    if (whole.state == BodyReader::State::done && whole.consumed != split.consumed) __builtin_trap();
    if (whole.consumed > in.size()) __builtin_trap();
    if (mode % 3 == 1 && whole.state == BodyReader::State::done && whole.body.size() != length) __builtin_trap();

    if (mode % 3 == 0 && whole.state == BodyReader::State::done) {
        std::string framed;
        if (!whole.body.empty()) {
            const auto frame = sluice::http::chunk_frame(whole.body.size());
            framed.append(frame.head, frame.head_size).append(whole.body).append(sluice::http::chunk_end);
        }
        framed.append(sluice::http::last_chunk);
        BodyLimits open;
        const Result again = decode(BodyReader::chunked(open), framed, {}, 64 * 1024);
        if (again.state != BodyReader::State::done || again.body != whole.body || again.consumed != framed.size())
            __builtin_trap();
    }
    return 0;
}
