// libFuzzer target: the HTTP/2 codec (H2Codec over libnghttp2) and h1_head_for, fed what a
// client sends after a valid preface, in pieces whose sizes the input chooses.
// Sources: src/http/h2_codec.cpp (links libnghttp2)
//
// The handler answers every request (some with a body, some trailers-only, some reset) and
// consumes request bodies, as the session does. Checked: nothing crashes or leaks; a
// request within its header bounds reaches the handler only with a method (and a path
// unless CONNECT), and h1_head_for gives a head or a problem, never both; a codec
// that refused the connection names why; after it, output() ends.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "http/h2_codec.hpp"

using namespace sluice::http;

namespace {

struct Handler : H2Codec::Handler {
    H2Codec* codec = nullptr;
    std::vector<std::int32_t> answer;
    void on_request(std::int32_t stream, H2Request request) override {
        if (request.too_large) return;  // answered 431 by the session, whatever it holds
        if (request.method.empty() || (request.method != "CONNECT" && request.path.empty())) std::abort();
        std::string problem;
        const std::string head = h1_head_for(request, problem);
        if (head.empty() == problem.empty()) std::abort();
        answer.push_back(stream);
    }
    void on_body(std::int32_t stream, std::string_view data) override { codec->consumed(stream, data.size()); }
    void on_body_end(std::int32_t) override {}
    void on_closed(std::int32_t, std::uint32_t) override {}
    void on_drained(std::int32_t) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    Handler handler;
    H2Settings settings;
    settings.max_header_list_bytes = 64 + data[0] * 64;
    settings.max_resets_per_second = 1 + data[0] % 16;
    settings.max_control_frames_per_second = 4 + data[0] % 64;
    H2Codec codec(handler, settings);
    handler.codec = &codec;
    std::string in = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    in.append(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::size_t at = 0;
    bool open = true;
    while (at < in.size() && open) {
        const std::size_t piece = 1 + static_cast<unsigned char>(in[at]) % 97;
        open = codec.receive(std::string_view(in).substr(at, piece));
        at += piece;
        for (std::size_t i = 0; i < handler.answer.size(); ++i) {
            const auto stream = handler.answer[i];
            switch (stream % 3) {
            case 0: codec.respond(stream, 200, {{"content-type", "text/plain"}}, true); codec.send_body(stream, "ok", true); break;
            case 1: codec.respond(stream, 200, {{"grpc-status", "8"}}, false); break;
            default: codec.reset(stream, 8); break;
            }
        }
        handler.answer.clear();
        for (int i = 0; i < 64 && !codec.output().empty(); ++i) {
        }
    }
    if (!open && codec.abuse() == H2Abuse::none && !codec.finished()) std::abort();
    return 0;
}
