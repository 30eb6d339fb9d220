// The HTTP/2 codec against frames a client writes: well-formed ones from libnghttp2's client
// session, and hostile ones built by hand (HPACK from libnghttp2's deflater, frame headers
// written here) that a real client library would refuse to send.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nghttp2/nghttp2.h>

#include "http/h2_codec.hpp"

using namespace sluice::http;

namespace {

constexpr std::string_view preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct Recorder : H2Codec::Handler {
    std::map<std::int32_t, H2Request> requests;
    std::map<std::int32_t, std::string> bodies;
    std::map<std::int32_t, bool> ended;
    std::map<std::int32_t, std::uint32_t> closed;
    void on_request(std::int32_t stream, H2Request request) override { requests[stream] = std::move(request); }
    void on_body(std::int32_t stream, std::string_view data) override { bodies[stream].append(data); }
    void on_body_end(std::int32_t stream) override { ended[stream] = true; }
    void on_closed(std::int32_t stream, std::uint32_t error) override { closed[stream] = error; }
    void on_drained(std::int32_t) override {}
};

std::string frame(std::uint8_t type, std::uint8_t flags, std::int32_t stream, std::string_view payload) {
    std::string out;
    const auto n = payload.size();
    out.push_back(static_cast<char>(n >> 16));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n));
    out.push_back(static_cast<char>(type));
    out.push_back(static_cast<char>(flags));
    out.push_back(static_cast<char>((stream >> 24) & 0x7f));
    out.push_back(static_cast<char>(stream >> 16));
    out.push_back(static_cast<char>(stream >> 8));
    out.push_back(static_cast<char>(stream));
    out.append(payload);
    return out;
}

// A header block, HPACK-encoded exactly as given (names and values unchecked).
std::string hpack(const std::vector<std::pair<std::string, std::string>>& fields) {
    nghttp2_hd_deflater* deflater = nullptr;
    nghttp2_hd_deflate_new(&deflater, 4096);
    std::vector<nghttp2_nv> nva;
    for (const auto& [n, v] : fields)
        nva.push_back({(uint8_t*)n.data(), (uint8_t*)v.data(), n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    std::string out(nghttp2_hd_deflate_bound(deflater, nva.data(), nva.size()), '\0');
    const auto n = nghttp2_hd_deflate_hd(deflater, (uint8_t*)out.data(), out.size(), nva.data(), nva.size());
    nghttp2_hd_deflate_del(deflater);
    REQUIRE(n >= 0);
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::vector<std::pair<std::string, std::string>> get(std::string path = "/") {
    return {{":method", "GET"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", path}};
}

// The start of every client connection: the preface and an empty SETTINGS frame.
std::string opening() { return std::string(preface) + frame(NGHTTP2_SETTINGS, 0, 0, ""); }

// What the server wrote, read by a client session: responses, their bodies, and GOAWAY.
struct Client {
    nghttp2_session* session = nullptr;
    std::map<std::int32_t, std::map<std::string, std::string>> heads;
    std::map<std::int32_t, std::string> bodies;
    std::map<std::int32_t, std::uint32_t> resets;
    std::optional<std::uint32_t> goaway;
    std::string to_send;  // body of the request being sent

    Client() {
        nghttp2_session_callbacks* cb = nullptr;
        nghttp2_session_callbacks_new(&cb);
        nghttp2_session_callbacks_set_on_header_callback(
            cb, [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl, const uint8_t* v, size_t vl,
                   uint8_t, void* self) {
                static_cast<Client*>(self)->heads[f->hd.stream_id][std::string((const char*)n, nl)] =
                    std::string((const char*)v, vl);
                return 0;
            });
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
            cb, [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* d, size_t len, void* self) {
                static_cast<Client*>(self)->bodies[id].append((const char*)d, len);
                return 0;
            });
        nghttp2_session_callbacks_set_on_frame_recv_callback(cb, [](nghttp2_session*, const nghttp2_frame* f, void* self) {
            auto* c = static_cast<Client*>(self);
            if (f->hd.type == NGHTTP2_GOAWAY) c->goaway = f->goaway.error_code;
            if (f->hd.type == NGHTTP2_RST_STREAM) c->resets[f->hd.stream_id] = f->rst_stream.error_code;
            return 0;
        });
        nghttp2_session_client_new(&session, cb, this);
        nghttp2_session_callbacks_del(cb);
        nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
    }
    ~Client() { nghttp2_session_del(session); }

    std::int32_t request(const std::vector<std::pair<std::string, std::string>>& fields, std::string body = {},
                         bool with_body = false) {
        std::vector<nghttp2_nv> nva;
        for (const auto& [n, v] : fields)
            nva.push_back({(uint8_t*)n.data(), (uint8_t*)v.data(), n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
        to_send = std::move(body);
        nghttp2_data_provider provider{};
        provider.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                                    nghttp2_data_source*, void* self) -> ssize_t {
            auto& rest = static_cast<Client*>(self)->to_send;
            const auto n = std::min(length, rest.size());
            std::memcpy(buf, rest.data(), n);
            rest.erase(0, n);
            if (rest.empty()) *flags |= NGHTTP2_DATA_FLAG_EOF;
            return static_cast<ssize_t>(n);
        };
        return nghttp2_submit_request(session, nullptr, nva.data(), nva.size(), with_body ? &provider : nullptr, this);
    }
    std::string bytes() {
        std::string out;
        const uint8_t* data = nullptr;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(session, &data)) > 0) out.append((const char*)data, n);
        return out;
    }
    void read(std::string_view server_bytes) {
        REQUIRE(nghttp2_session_mem_recv(session, (const uint8_t*)server_bytes.data(), server_bytes.size()) >= 0);
    }
};

// The frames in `bytes` as (type, stream, error code of RST_STREAM or GOAWAY).
struct Frame {
    int type;
    std::int32_t stream;
    std::uint32_t error;
};
std::vector<Frame> frames(std::string_view bytes) {
    std::vector<Frame> out;
    auto byte = [&bytes](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])); };
    for (std::size_t at = 0; at + 9 <= bytes.size();) {
        const std::size_t n = byte(at) << 16 | byte(at + 1) << 8 | byte(at + 2);
        Frame f{static_cast<int>(byte(at + 3)),
                static_cast<std::int32_t>((byte(at + 5) & 0x7f) << 24 | byte(at + 6) << 16 | byte(at + 7) << 8 | byte(at + 8)),
                0};
        const std::size_t code = f.type == NGHTTP2_RST_STREAM ? at + 9 : at + 13;
        if ((f.type == NGHTTP2_RST_STREAM || f.type == NGHTTP2_GOAWAY) && code + 4 <= bytes.size())
            f.error = byte(code) << 24 | byte(code + 1) << 16 | byte(code + 2) << 8 | byte(code + 3);
        out.push_back(f);
        at += 9 + n;
    }
    return out;
}

std::string drain(H2Codec& codec) {
    std::string out;
    for (auto piece = codec.output(); !piece.empty(); piece = codec.output()) out.append(piece);
    return out;
}

}  // namespace

TEST_CASE("h2 codec: a request reaches the handler and its response the client", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    Client client;
    const auto id = client.request({{":method", "GET"}, {":scheme", "https"}, {":authority", "app.test"},
                                    {":path", "/a?b=1"}, {"user-agent", "t"}, {"cookie", "a=1"}, {"cookie", "b=2"}});
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE(r.requests.count(id));
    const auto& req = r.requests[id];
    CHECK(req.method == "GET");
    CHECK(req.path == "/a?b=1");
    CHECK(req.authority == "app.test");
    CHECK(req.end_stream);
    CHECK(req.fields.size() == 3);
    REQUIRE(codec.respond(id, 200, {{"content-type", "text/plain"}}, true));
    codec.send_body(id, "hel", false);
    codec.send_body(id, "lo", true);
    client.read(drain(codec));
    CHECK(client.heads[id][":status"] == "200");
    CHECK(client.heads[id]["content-type"] == "text/plain");
    CHECK(client.bodies[id] == "hello");
    CHECK(r.closed.count(id));
    CHECK(r.closed[id] == 0);
}

TEST_CASE("h2 codec: the frames ready are gathered into one write, a large body's up to the limit", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    Client client;
    client.read(drain(codec));  // the server's SETTINGS
    const auto small = client.request(get());
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE(codec.respond(small, 200, {{"content-type", "text/plain"}}, true));
    codec.send_body(small, "ok\n", true);
    // A small response: its HEADERS and its DATA in one gathering, one write.
    std::string gathered;
    REQUIRE(codec.gather_output(gathered, 16384));
    std::vector<int> types;
    for (const auto& f : frames(gathered))
        if (f.stream == small) types.push_back(f.type);
    CHECK(types == std::vector<int>{NGHTTP2_HEADERS, NGHTTP2_DATA});
    client.read(gathered);
    CHECK(client.bodies[small] == "ok\n");
    gathered.clear();
    CHECK_FALSE(codec.gather_output(gathered, 16384));  // nothing left: nothing appended
    CHECK(gathered.empty());

    // A body of 60,000 bytes (within the stream's first window): DATA frames of up to 16,384
    // bytes, gathered while fewer than 16,384 bytes are held, so at most one frame past it.
    const auto large = client.request(get());
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE(codec.respond(large, 200, {}, true));
    const std::string body(60000, 'b');
    codec.send_body(large, body, true);
    std::size_t writes = 0;
    for (gathered.clear(); codec.gather_output(gathered, 16384); gathered.clear()) {
        ++writes;
        CHECK(gathered.size() < 16384 + 16384 + 9);
        client.read(gathered);
    }
    CHECK(writes >= 2);
    CHECK(writes <= 4);
    CHECK(client.bodies[large] == body);
    // Appends to what the buffer holds, and says whether it added anything.
    const auto third = client.request(get());
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE(codec.respond(third, 204, {}, false));
    gathered = "held";
    REQUIRE(codec.gather_output(gathered, 16384));
    CHECK(gathered.substr(0, 4) == "held");
    CHECK(gathered.size() > 4);
}

TEST_CASE("h2 codec: a request body arrives in pieces and its window opens only as it is consumed", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    Client client;
    const std::string body(100000, 'x');
    const auto id = client.request({{":method", "POST"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}},
                                   body, true);
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE(r.requests.count(id));
    CHECK_FALSE(r.requests[id].end_stream);
    // The client may send one stream window (65,535 bytes), no more, until it is consumed.
    CHECK(r.bodies[id].size() == 65535);
    CHECK_FALSE(r.ended[id]);
    client.read(drain(codec));
    REQUIRE(codec.receive(client.bytes()));  // (SETTINGS acknowledged; no DATA)
    CHECK(r.bodies[id].size() == 65535);
    codec.consumed(id, r.bodies[id].size());
    client.read(drain(codec));
    REQUIRE(codec.receive(client.bytes()));
    CHECK(r.bodies[id] == body);
    CHECK(r.ended[id]);
}

TEST_CASE("h2 codec: a response before the request body's end goes out whole, then RST_STREAM NO_ERROR", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    Client client;
    const auto id = client.request({{":method", "POST"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}},
                                   std::string(100000, 'x'), true);
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE_FALSE(r.ended[id]);
    SECTION("with a body") {
        REQUIRE(codec.respond(id, 413, {{"content-length", "4"}}, true));
        codec.send_body(id, "big!", true);
        codec.reset_after_response(id);
        const auto out = drain(codec);
        std::vector<int> kinds;
        for (const auto& f : frames(out))
            if (f.stream == id) kinds.push_back(f.type);
        CHECK(kinds == std::vector<int>{NGHTTP2_HEADERS, NGHTTP2_DATA, NGHTTP2_RST_STREAM});
        client.read(out);
        CHECK(client.heads[id][":status"] == "413");
        CHECK(client.bodies[id] == "big!");
        REQUIRE(client.resets.count(id));
        CHECK(client.resets[id] == NGHTTP2_NO_ERROR);
    }
    SECTION("without a body, the response already out") {
        REQUIRE(codec.respond(id, 204, {}, false));
        const auto head = drain(codec);
        codec.reset_after_response(id);
        const auto rest = drain(codec);
        REQUIRE(frames(rest).size() == 1);
        CHECK(frames(rest)[0].type == NGHTTP2_RST_STREAM);
        client.read(head + rest);
        CHECK(client.heads[id][":status"] == "204");
        CHECK(client.resets[id] == NGHTTP2_NO_ERROR);
    }
    SECTION("reset() itself goes ahead of a response still queued") {
        REQUIRE(codec.respond(id, 413, {{"content-length", "4"}}, true));
        codec.send_body(id, "big!", true);
        codec.reset(id, NGHTTP2_NO_ERROR);
        client.read(drain(codec));
        CHECK_FALSE(client.heads.count(id));
        CHECK(client.resets.count(id));
    }
}

TEST_CASE("h2 codec: trailers-only response (a gRPC status) is one HEADERS frame", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    Client client;
    const auto id = client.request(get());
    REQUIRE(codec.receive(client.bytes()));
    REQUIRE(codec.respond(id, 200, {{"content-type", "application/grpc"}, {"grpc-status", "8"}}, false));
    client.read(drain(codec));
    CHECK(client.heads[id]["grpc-status"] == "8");
    CHECK(client.bodies[id].empty());
    CHECK(r.closed.count(id));
}

TEST_CASE("h2 codec: a header list past max_header_list_bytes is flagged, not kept", "[h2]") {
    Recorder r;
    H2Settings settings;
    settings.max_header_list_bytes = 1000;
    H2Codec codec(r, settings);
    auto fields = get();
    fields.emplace_back("x-big", std::string(2000, 'a'));
    const std::string block = hpack(fields);
    // Sent in a HEADERS frame and two CONTINUATIONs.
    const std::string bytes = opening() + frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, block.substr(0, 100)) +
                              frame(NGHTTP2_CONTINUATION, 0, 1, block.substr(100, 100)) +
                              frame(NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 1, block.substr(200));
    REQUIRE(codec.receive(bytes));
    REQUIRE(r.requests.count(1));
    CHECK(r.requests[1].too_large);
    CHECK(r.requests[1].fields.empty());
}

TEST_CASE("h2 codec: rapid reset ends the connection with GOAWAY ENHANCE_YOUR_CALM", "[h2]") {
    Recorder r;
    H2Settings settings;
    settings.max_resets_per_second = 50;
    H2Codec codec(r, settings);
    std::string bytes = opening();
    const std::string block = hpack(get());
    for (std::int32_t id = 1; id < 2 * 200; id += 2) {
        bytes += frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, id, block);
        bytes += frame(NGHTTP2_RST_STREAM, 0, id, std::string("\0\0\0\x08", 4));
    }
    CHECK_FALSE(codec.receive(bytes));
    CHECK(codec.abuse() == H2Abuse::rapid_reset);
    CHECK(r.requests.size() <= 51);
    Client client;
    client.read(drain(codec));
    REQUIRE(client.goaway);
    CHECK(*client.goaway == NGHTTP2_ENHANCE_YOUR_CALM);
}

TEST_CASE("h2 codec: a CONTINUATION flood ends the connection", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    const std::string block = hpack(get());
    std::string bytes = opening() + frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, block);
    const std::string more = hpack({{"x-a", "b"}});
    for (int i = 0; i < 50; ++i) bytes += frame(NGHTTP2_CONTINUATION, 0, 1, more);
    CHECK_FALSE(codec.receive(bytes));
    CHECK(codec.abuse() == H2Abuse::continuation_flood);
    CHECK(r.requests.empty());
    Client client;
    client.read(drain(codec));
    REQUIRE(client.goaway);
    CHECK(*client.goaway == NGHTTP2_ENHANCE_YOUR_CALM);
}

TEST_CASE("h2 codec: PING, SETTINGS, empty DATA and unearned WINDOW_UPDATE floods end the connection", "[h2]") {
    const std::string block = hpack({{":method", "POST"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}});
    for (int kind = 0; kind < 4; ++kind) {
        Recorder r;
        H2Settings settings;
        settings.max_control_frames_per_second = 100;
        H2Codec codec(r, settings);
        std::string bytes = opening() + frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block);
        for (int i = 0; i < 300; ++i) {
            if (kind == 0) bytes += frame(NGHTTP2_PING, 0, 0, std::string(8, '\0'));
            if (kind == 1) bytes += frame(NGHTTP2_SETTINGS, 0, 0, "");
            if (kind == 2) bytes += frame(NGHTTP2_DATA, 0, 1, "");
            if (kind == 3) bytes += frame(NGHTTP2_WINDOW_UPDATE, 0, 0, std::string("\0\0\0\1", 4));
        }
        CAPTURE(kind);
        CHECK_FALSE(codec.receive(bytes));
        CHECK(codec.abuse() == H2Abuse::control_flood);
    }
}

TEST_CASE("h2 codec: a client opening the windows after every DATA frame is no flood", "[h2]") {
    // Python's h2 and others send WINDOW_UPDATE for the stream and the connection as each
    // DATA frame is read: a fast download is hundreds of them a second.
    Recorder r;
    H2Settings settings;
    settings.max_control_frames_per_second = 100;
    H2Codec codec(r, settings);
    const std::string block = hpack(get("/big"));
    REQUIRE(codec.receive(opening() + frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, block)));
    const std::size_t size = 4 << 20;
    REQUIRE(codec.respond(1, 200, {}, true));
    codec.send_body(1, std::string(size, 'b'), true);
    std::size_t received = 0, updates = 0;
    for (int turn = 0; turn < 10000 && received < size; ++turn) {
        const std::string out = drain(codec);
        std::string answer;
        auto byte = [&out](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(out[i])); };
        for (std::size_t at = 0; at + 9 <= out.size();) {
            const std::uint32_t n = byte(at) << 16 | byte(at + 1) << 8 | byte(at + 2);
            if (byte(at + 3) == NGHTTP2_DATA && n > 0) {
                received += n;
                const std::string increment{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                                            static_cast<char>(n)};
                answer += frame(NGHTTP2_WINDOW_UPDATE, 0, 1, increment) + frame(NGHTTP2_WINDOW_UPDATE, 0, 0, increment);
                updates += 2;
            }
            at += 9 + n;
        }
        REQUIRE(codec.receive(answer));
    }
    CHECK(received == size);
    CHECK(updates > 4 * settings.max_control_frames_per_second);
    CHECK(codec.abuse() == H2Abuse::none);
}

TEST_CASE("h2 codec: smuggling fields and malformed requests never reach the handler", "[h2]") {
    const std::vector<std::vector<std::pair<std::string, std::string>>> cases = {
        {{":method", "POST"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"transfer-encoding", "chunked"}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"connection", "keep-alive"}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"x-a", "b\r\nx-b: c"}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"x-a", std::string("b\0c", 3)}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"X-Upper", "b"}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"te", "gzip"}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}},  // no :path
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {":path", "/b"}},
        {{":method", "GET"}, {"x-a", "b"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}},
        {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {":status", "200"}},
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(i);
        Recorder r;
        H2Codec codec(r, {});
        const std::string bytes =
            opening() + frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, hpack(cases[i]));
        codec.receive(bytes);
        CHECK(r.requests.empty());
        bool refused = false;
        for (const auto& f : frames(drain(codec)))
            refused = refused || (f.type == NGHTTP2_RST_STREAM && f.stream == 1 && f.error == NGHTTP2_PROTOCOL_ERROR) ||
                      (f.type == NGHTTP2_GOAWAY && f.error == NGHTTP2_PROTOCOL_ERROR);
        CHECK(refused);
    }
}

TEST_CASE("h2 codec: a body longer than its content-length resets the stream", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    const std::string block =
        hpack({{":method", "POST"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}, {"content-length", "3"}});
    const std::string bytes = opening() + frame(NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block) +
                              frame(NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "abcdef");
    codec.receive(bytes);
    CHECK_FALSE(r.ended[1]);
    bool reset = false;
    for (const auto& f : frames(drain(codec)))
        reset = reset || (f.type == NGHTTP2_RST_STREAM && f.stream == 1 && f.error == NGHTTP2_PROTOCOL_ERROR);
    CHECK(reset);
    REQUIRE(r.closed.count(1));
    CHECK(r.closed[1] == NGHTTP2_PROTOCOL_ERROR);
}

TEST_CASE("h2 codec: a request as the HTTP/1.1 head that stands for it", "[h2]") {
    struct Case {
        H2Request request;
        std::string head;     // expected; empty: refused
        std::string problem;  // expected when refused
    };
    auto make = [](std::string method, std::string authority, H2Fields fields, bool end) {
        H2Request r;
        r.method = std::move(method);
        r.scheme = "https";
        r.authority = std::move(authority);
        r.path = "/p?q";
        r.fields = std::move(fields);
        r.end_stream = end;
        return r;
    };
    const std::vector<Case> cases = {
        {make("GET", "app.test", {{"accept", "*/*"}}, true), "GET /p?q HTTP/1.1\r\naccept: */*\r\nhost: app.test\r\n\r\n", ""},
        {make("GET", "app.test", {{"cookie", "a=1"}, {"x", "y"}, {"cookie", "b=2"}}, true),
         "GET /p?q HTTP/1.1\r\nx: y\r\nhost: app.test\r\ncookie: a=1; b=2\r\n\r\n", ""},
        {make("POST", "app.test", {{"content-length", "5"}}, false),
         "POST /p?q HTTP/1.1\r\ncontent-length: 5\r\nhost: app.test\r\n\r\n", ""},
        {make("POST", "app.test", {{"expect", "100-continue"}}, false),
         "POST /p?q HTTP/1.1\r\nhost: app.test\r\ntransfer-encoding: chunked\r\n\r\n", ""},
        {make("GET", "", {{"host", "h.test"}}, true), "GET /p?q HTTP/1.1\r\nhost: h.test\r\n\r\n", ""},
        {make("GET", "App.Test", {{"host", "app.test"}}, true), "GET /p?q HTTP/1.1\r\nhost: App.Test\r\n\r\n", ""},
        {make("GET", "app.test", {{"host", "other.test"}}, true), "", "Host names another host than :authority"},
        {make("GET", "", {{"host", "a"}, {"host", "b"}}, true), "", "the request has two Host fields"},
    };
    for (const auto& c : cases) {
        std::string problem;
        const auto head = h1_head_for(c.request, problem);
        CAPTURE(c.head);
        CHECK(head == c.head);
        CHECK(problem == c.problem);
    }
}

TEST_CASE("h2 codec: a client that is not HTTP/2 gets GOAWAY", "[h2]") {
    Recorder r;
    H2Codec codec(r, {});
    CHECK_FALSE(codec.receive("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    CHECK(codec.abuse() == H2Abuse::protocol_error);
    CHECK_FALSE(drain(codec).empty());
}
