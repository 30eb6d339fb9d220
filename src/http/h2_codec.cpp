#include "http/h2_codec.hpp"

#include <algorithm>
#include <cstring>

#include <nghttp2/nghttp2.h>

#include "alloc/library_memory.hpp"

namespace sluice::http {

std::string_view h2_abuse_name(H2Abuse abuse) {
    switch (abuse) {
    case H2Abuse::none: return "none";
    case H2Abuse::rapid_reset: return "rapid_reset";
    case H2Abuse::continuation_flood: return "continuation_flood";
    case H2Abuse::control_flood: return "control_flood";
    case H2Abuse::protocol_error: return "protocol_error";
    }
    return "none";
}

// nghttp2's callbacks, as members of a friend: they reach the codec's state.
struct H2Callbacks {
    static H2Codec& codec(void* user_data) { return *static_cast<H2Codec*>(user_data); }

    static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
        auto& c = codec(user_data);
        if (hd->type == NGHTTP2_HEADERS) {
            c.continuing_stream_ = hd->stream_id;
            ++c.header_blocks_;
            c.continuations_ = 0;
            if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM) && !c.count_control_frame())
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (hd->type == NGHTTP2_CONTINUATION) {
            // nghttp2 checks that it continues the open block; the number is ours to bound.
            if (++c.continuations_ > c.settings_.max_continuations) {
                c.fail(H2Abuse::continuation_flood);
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
            if (hd->length == 0 && !c.count_control_frame()) return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (hd->type == NGHTTP2_DATA) {
            // An empty DATA frame that does not end the stream carries nothing: a flood of
            // them costs the server work for free (CVE-2019-9518).
            if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM) && !c.count_control_frame())
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (hd->type == NGHTTP2_WINDOW_UPDATE) {
            // A client that reads what it is sent opens the windows again: those are earned
            // (below), only the others count as control frames.
            if (c.window_updates_earned_ > 0)
                --c.window_updates_earned_;
            else if (!c.count_control_frame())
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (hd->type == NGHTTP2_SETTINGS || hd->type == NGHTTP2_PING || hd->type == NGHTTP2_PRIORITY) {
            if (!c.count_control_frame()) return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (hd->type == NGHTTP2_RST_STREAM) {
            // Rapid reset (CVE-2023-44487): a stream opened and reset at once costs the
            // client nothing and the server a request's start.
            const auto now = std::chrono::steady_clock::now();
            if (now - c.window_start_ >= std::chrono::seconds(1)) {
                c.window_start_ = now;
                c.resets_ = 0;
                c.control_frames_ = 0;
            }
            if (++c.resets_ > c.settings_.max_resets_per_second) {
                c.fail(H2Abuse::rapid_reset);
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
        }
        return 0;
    }

    static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
        auto& c = codec(user_data);
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
            c.incoming_[frame->hd.stream_id] = H2Codec::Incoming{};
        return 0;
    }

    static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                         const uint8_t* value, size_t valuelen, uint8_t, void* user_data) {
        auto& c = codec(user_data);
        auto it = c.incoming_.find(frame->hd.stream_id);
        if (it == c.incoming_.end()) return 0;
        auto& request = it->second.request;
        // Trailers of a request body are read (HPACK must be) and counted, not forwarded.
        request.header_bytes += namelen + valuelen + 32;
        if (request.header_bytes > c.settings_.max_header_list_bytes) request.too_large = true;
        if (request.too_large || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
        const std::string_view n(reinterpret_cast<const char*>(name), namelen);
        std::string v(reinterpret_cast<const char*>(value), valuelen);
        if (n == ":method") request.method = std::move(v);
        else if (n == ":scheme") request.scheme = std::move(v);
        else if (n == ":authority") request.authority = std::move(v);
        else if (n == ":path") request.path = std::move(v);
        else if (!n.empty() && n.front() != ':') request.fields.emplace_back(std::string(n), std::move(v));
        return 0;
    }

    static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
        auto& c = codec(user_data);
        const auto id = frame->hd.stream_id;
        const bool end_stream = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
        if (frame->hd.type == NGHTTP2_HEADERS) {
            c.continuing_stream_ = 0;
            auto it = c.incoming_.find(id);
            if (it == c.incoming_.end()) return 0;
            if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
                H2Request request = std::move(it->second.request);
                request.end_stream = end_stream;
                it->second.request = H2Request{};
                it->second.request.header_bytes = request.header_bytes;
                c.handler_.on_request(id, std::move(request));
            } else if (end_stream) {
                c.handler_.on_body_end(id);  // after trailers
            }
        } else if (frame->hd.type == NGHTTP2_DATA && end_stream) {
            if (c.incoming_.count(id)) c.handler_.on_body_end(id);
        }
        return 0;
    }

    static int on_data_chunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                             void* user_data) {
        auto& c = codec(user_data);
        auto it = c.incoming_.find(stream_id);
        if (it == c.incoming_.end()) {
            nghttp2_session_consume(session, stream_id, len);
            return 0;
        }
        it->second.body_bytes += len;
        c.handler_.on_body(stream_id, std::string_view(reinterpret_cast<const char*>(data), len));
        return 0;
    }

    static int on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
        auto& c = codec(user_data);
        if (c.reset_after_.empty() || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
        if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
        auto it = std::find(c.reset_after_.begin(), c.reset_after_.end(), frame->hd.stream_id);
        if (it == c.reset_after_.end()) return 0;
        *it = c.reset_after_.back();
        c.reset_after_.pop_back();
        // (A client that ended its body meanwhile closed the stream: nothing to reset.)
        if (nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0)
            nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
        return 0;
    }

    static int on_stream_close(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user_data) {
        auto& c = codec(user_data);
        c.incoming_.erase(stream_id);
        c.outgoing_.erase(stream_id);
        if (auto it = std::find(c.reset_after_.begin(), c.reset_after_.end(), stream_id); it != c.reset_after_.end()) {
            *it = c.reset_after_.back();
            c.reset_after_.pop_back();
        }
        c.handler_.on_closed(stream_id, error_code);
        return 0;
    }

    static ssize_t read_body(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                             uint32_t* data_flags, nghttp2_data_source*, void* user_data) {
        auto& c = codec(user_data);
        auto it = c.outgoing_.find(stream_id);
        if (it == c.outgoing_.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        auto& out = it->second;
        const std::size_t n = std::min(length, out.data.size() - out.sent);
        std::memcpy(buf, out.data.data() + out.sent, n);
        out.sent += n;
        if (n > 0) c.earn_window_updates();
        if (out.sent == out.data.size()) {
            out.data.clear();
            out.sent = 0;
        }
        if (out.data.empty()) {
            if (out.last) {
                *data_flags |= NGHTTP2_DATA_FLAG_EOF;
                if (!out.trailers.empty()) {
                    std::vector<nghttp2_nv> nva;
                    for (auto& [name, value] : out.trailers)
                        nva.push_back({reinterpret_cast<uint8_t*>(name.data()), reinterpret_cast<uint8_t*>(value.data()),
                                       name.size(), value.size(), NGHTTP2_NV_FLAG_NONE});
                    if (nghttp2_submit_trailer(session, stream_id, nva.data(), nva.size()) == 0)
                        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                }
            } else if (n == 0) {
                out.deferred = true;
                return NGHTTP2_ERR_DEFERRED;
            }
            if (n > 0) c.handler_.on_drained(stream_id);
        }
        return static_cast<ssize_t>(n);
    }
};

H2Codec::H2Codec(Handler& handler, const H2Settings& settings) : handler_(handler), settings_(settings) {
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, H2Callbacks::on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, H2Callbacks::on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, H2Callbacks::on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, H2Callbacks::on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, H2Callbacks::on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, H2Callbacks::on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, H2Callbacks::on_frame_send);

    nghttp2_option* option = nullptr;
    nghttp2_option_new(&option);
    // Request body windows open only as far as the body has been forwarded: a client cannot
    // make sluice hold more than the windows of its streams.
    nghttp2_option_set_no_auto_window_update(option, 1);
    // libnghttp2's own limits (Debian's 1.52 has them backported) stay behind ours, looser,
    // so that ours, which are counted and named, act first.
    nghttp2_option_set_stream_reset_rate_limit(option, 2ull * settings_.max_resets_per_second + 1,
                                               2ull * settings_.max_resets_per_second + 1);
    nghttp2_option_set_max_continuations(option, settings_.max_continuations + 1);
    nghttp2_session_server_new3(&session_, callbacks, this, option, alloc::nghttp2_memory());
    nghttp2_option_del(option);
    nghttp2_session_callbacks_del(callbacks);

    const nghttp2_settings_entry entries[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, settings_.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, settings_.stream_window_bytes},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, settings_.max_header_list_bytes},
        // RFC 9218: no RFC 7540 priority tree. nghttp2 then keeps no tree and no closed
        // streams for it (up to max_concurrent_streams of them per connection otherwise):
        // 440 instructions less per h2 request. The streams' own requests are independent;
        // PRIORITY frames are still read and ignored.
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, entries, sizeof entries / sizeof entries[0]);
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          static_cast<int32_t>(settings_.connection_window_bytes));
}

H2Codec::~H2Codec() { nghttp2_session_del(session_); }

void H2Codec::fail(H2Abuse abuse) {
    if (abuse_ == H2Abuse::none) abuse_ = abuse;
}

void H2Codec::earn_window_updates() {
    // Each DATA frame sent may be answered with two WINDOW_UPDATEs (its stream's and the
    // connection's), as Envoy's max_inbound_window_update_frames_per_data_frame_sent
    // allows; the credit is bounded so that a long download does not buy a later flood.
    window_updates_earned_ = std::min<std::uint32_t>(window_updates_earned_ + 2, 4 * settings_.max_control_frames_per_second + 64);
}

bool H2Codec::count_control_frame() {
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
        window_start_ = now;
        resets_ = 0;
        control_frames_ = 0;
    }
    if (++control_frames_ > settings_.max_control_frames_per_second) {
        fail(H2Abuse::control_flood);
        return false;
    }
    return true;
}

bool H2Codec::receive(std::string_view bytes) {
    const auto rv =
        nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (rv < 0) {
        const bool ours = abuse_ != H2Abuse::none;
        fail(H2Abuse::protocol_error);
        nghttp2_session_terminate_session(session_, ours ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
        return false;
    }
    return !finished();
}

std::string_view H2Codec::output() {
    const uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session_, &data);
    if (n <= 0) return {};
    return {reinterpret_cast<const char*>(data), static_cast<std::size_t>(n)};
}

bool H2Codec::gather_output(std::string& into, std::size_t max) {
    const std::size_t before = into.size();
    while (into.size() < max) {
        const auto out = output();
        if (out.empty()) break;
        into.append(out);
    }
    return into.size() > before;
}

bool H2Codec::finished() const {
    return !nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_);
}

bool H2Codec::wants_write() const { return nghttp2_session_want_write(session_) != 0; }

bool H2Codec::respond(std::int32_t stream, unsigned status, const H2Fields& fields, bool has_body) {
    const std::string code = std::to_string(status);
    static const std::string status_name = ":status";
    thread_local std::vector<nghttp2_nv> nva;  // (nghttp2 copies the fields before it returns)
    nva.clear();
    auto add = [](const std::string& name, const std::string& value) {
        nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                       reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                       NGHTTP2_NV_FLAG_NONE});
    };
    add(status_name, code);
    for (const auto& [name, value] : fields) add(name, value);
    nghttp2_data_provider provider{};
    provider.read_callback = H2Callbacks::read_body;
    if (has_body) outgoing_[stream] = Outgoing{};
    const int rv = nghttp2_submit_response(session_, stream, nva.data(), nva.size(), has_body ? &provider : nullptr);
    if (rv != 0) outgoing_.erase(stream);
    return rv == 0;
}

void H2Codec::send_body(std::int32_t stream, std::string_view data, bool last, H2Fields trailers) {
    auto it = outgoing_.find(stream);
    if (it == outgoing_.end()) return;
    auto& out = it->second;
    out.data.append(data);
    out.last = out.last || last;
    if (last) out.trailers = std::move(trailers);
    if (out.deferred && (!data.empty() || last)) {
        out.deferred = false;
        nghttp2_session_resume_data(session_, stream);
    }
}

std::size_t H2Codec::buffered(std::int32_t stream) const {
    auto it = outgoing_.find(stream);
    return it == outgoing_.end() ? 0 : it->second.data.size() - it->second.sent;
}

void H2Codec::reset(std::int32_t stream, std::uint32_t error) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, error);
}

void H2Codec::reset_after_response(std::int32_t stream) {
    const int local = nghttp2_session_get_stream_local_close(session_, stream);
    if (local < 0) return;  // closed already
    if (local == 1) {
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, NGHTTP2_NO_ERROR);
        return;
    }
    if (std::find(reset_after_.begin(), reset_after_.end(), stream) == reset_after_.end()) reset_after_.push_back(stream);
}

void H2Codec::consumed(std::int32_t stream, std::size_t n) {
    if (n == 0) return;
    if (nghttp2_session_consume(session_, stream, n) != 0) nghttp2_session_consume_connection(session_, n);
}

void H2Codec::shut_down() {
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                          NGHTTP2_NO_ERROR, nullptr, 0);
}

void H2Codec::give_up() { nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR); }

std::size_t H2Codec::open_streams() const { return incoming_.size(); }

std::string h1_head_for(const H2Request& request, std::string& problem) {
    std::string head;
    head.reserve(256);
    head.append(request.method).append(" ").append(request.path).append(" HTTP/1.1\r\n");
    const std::string* host = nullptr;
    std::string cookies;
    bool has_length = false;
    for (const auto& [name, value] : request.fields) {
        if (name == "host") {
            if (host) {
                problem = "the request has two Host fields";
                return {};
            }
            host = &value;
            continue;
        }
        if (name == "cookie") {
            if (!cookies.empty()) cookies.append("; ");
            cookies.append(value);
            continue;
        }
        if (name == "expect") continue;
        if (name == "content-length") has_length = true;
        head.append(name).append(": ").append(value).append("\r\n");
    }
    if (!request.authority.empty()) {
        const auto lower = [](std::string s) {
            for (auto& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
            return s;
        };
        if (host && lower(*host) != lower(request.authority)) {
            problem = "Host names another host than :authority";
            return {};
        }
        head.append("host: ").append(request.authority).append("\r\n");
    } else if (host) {
        head.append("host: ").append(*host).append("\r\n");
    }
    if (!cookies.empty()) head.append("cookie: ").append(cookies).append("\r\n");
    if (!request.end_stream && !has_length) head.append("transfer-encoding: chunked\r\n");
    head.append("\r\n");
    return head;
}

}  // namespace sluice::http
