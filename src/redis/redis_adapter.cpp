#include "redis/redis_adapter.hpp"

#include <array>
#include <cstdio>
#include <exception>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <hiredis/async.h>

#include "net/read_readiness.hpp"
#include "redis/redis_reply.hpp"

// hiredis 0.14 exports it without declaring it: runs the callbacks of the replies its reader
// holds, and disconnects on a protocol error (what redisAsyncHandleRead does after reading).
extern "C" void redisProcessCallbacks(::redisAsyncContext* ac);

namespace sluice::redis {
namespace {

namespace asio = boost::asio;
namespace net = sluice::net;

// One per hiredis context. hiredis holds a heap `shared_ptr` to it in ev.data (released in
// `cleanup`); every pending wait holds another, so a handler that runs after cleanup finds
// the adapter alive and the context gone (nullptr), and does nothing.
//
// The hooks are idempotent and re-entrant: hiredis calls add_read from inside
// redisAsyncHandleRead. At most one wait per direction is pending; `want` says whether
// hiredis currently wants the event, `waiting` whether a wait is in flight.
class AsioAdapter : public std::enable_shared_from_this<AsioAdapter> {
public:
    AsioAdapter(asio::io_context& io_context, ::redisAsyncContext* context)
        : context_(context), socket_(io_context, context->c.fd) {}

    void add_read() { start(read_); }
    void del_read() { read_.want = false; }
    // On a connected context hiredis asks for the writable event whenever a command is
    // queued, though the socket nearly always takes it at once. Waiting for that event cost
    // an epoll_ctl (Asio re-arms the descriptor for every wait) and a wake-up per batch of
    // commands: the write is attempted first instead, later in this turn of the event loop
    // (the limiter usually writes before then: RedisConnection::flush_output), and the event
    // is waited for only when the socket did not take everything. While connecting, the
    // writable event is how hiredis learns that the connection is made: waited for as before.
    void add_write() {
        write_.want = true;
        if (attempting_write_ || writer_writes_ || write_.waiting || !context_) return;
        if (!(context_->c.flags & REDIS_CONNECTED)) return wait(write_);
        if (write_soon_) return;
        write_soon_ = true;
        asio::post(socket_.get_executor(), [self = shared_from_this()] { self->attempt_write(); });
    }
    void del_write() { write_.want = false; }
    // Set around a command whose issuer writes it itself right after (hold_write_attempts).
    void hold_write_attempts(bool on) { writer_writes_ = on; }

    // hiredis is about to close the fd: stop watching it without closing it.
    // release() also completes pending waits with operation_aborted.
    // Returns the context so the caller can unhook it.
    ::redisAsyncContext* cleanup() {
        auto* context = context_;
        context_ = nullptr;
        read_.want = write_.want = false;
        socket_.release();
        return context;
    }

private:
    struct Direction {
        asio::posix::stream_descriptor::wait_type type;
        void (*handle)(::redisAsyncContext*);  // redisAsyncHandleRead or ...Write
        bool want = false;
        bool waiting = false;
    };

    void start(Direction& direction) {
        direction.want = true;
        wait(direction);
    }

    void wait(Direction& direction) {
        if (direction.waiting || !context_) return;
        if (&direction == &read_ && (context_->c.flags & REDIS_CONNECTED)) return receive();
        direction.waiting = true;
        socket_.async_wait(direction.type,
                           [self = shared_from_this(), &direction](const boost::system::error_code& ec) {
                               direction.waiting = false;
                               if (ec || !self->context_ || !direction.want) return;
                               direction.handle(self->context_);
                               // The context may be gone now (cleanup ran inside the handler).
                               if (self->context_ && direction.want) self->wait(direction);
                           });
    }

    // A connected context's replies are received here and handed to hiredis's reader, rather
    // than waited for and read by hiredis: a wait re-arms the descriptor with an epoll_ctl
    // every time (Asio's waits do), a receive does not, and where it drained the socket with
    // no close behind, the next one waits without a receive first (net/read_readiness.hpp).
    // So a call's reply costs one receive and no epoll_ctl.
    void receive() {
        read_.waiting = true;
        if (!in_) in_ = std::make_unique<std::array<char, 16 * 1024>>();
        socket_.async_read_some(net::ReadReadiness(socket_).buffer(asio::buffer(*in_)),
                                [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                                    self->read_.waiting = false;
                                    self->received(ec, n);
                                });
    }

    void received(const boost::system::error_code& ec, std::size_t n) {
        if (ec == asio::error::operation_aborted || !context_) return;
        if (n > 0) {
            net::ReadReadiness(socket_).read_done(n, in_->size());
            // A reader that fails (out of memory) keeps its error, and redisProcessCallbacks
            // then disconnects, as after hiredis's own read. So does one that would hold more
            // than max_unparsed_reply_bytes of a reply still arriving.
            ::redisReader* reader = context_->c.reader;
            if (reader->err == 0 && reader->len - reader->pos + n > max_unparsed_reply_bytes) {
                reader->err = REDIS_ERR_PROTOCOL;
                std::snprintf(reader->errstr, sizeof reader->errstr, "a reply of more than %zu MiB",
                              max_unparsed_reply_bytes >> 20);
            } else {
                redisReaderFeed(reader, in_->data(), n);
            }
            redisProcessCallbacks(context_);
        } else {
            // The end of the stream or an error: hiredis reads the socket itself, finds the
            // end, and disconnects the way it does (callbacks told, cleanup).
            redisAsyncHandleRead(context_);
        }
        // The context may be gone now (a callback freed it, or the disconnect).
        if (context_ && read_.want) wait(read_);
    }

    void attempt_write() {
        write_soon_ = false;
        if (!context_ || !write_.want || write_.waiting) return;
        attempting_write_ = true;  // hiredis asks again from inside when not all was taken
        redisAsyncHandleWrite(context_);
        attempting_write_ = false;
        // The context may be gone now (a failed write disconnects it).
        if (context_ && write_.want) wait(write_);
    }

    ::redisAsyncContext* context_;
    asio::posix::stream_descriptor socket_;
    std::unique_ptr<std::array<char, 16 * 1024>> in_;  // receive()'s buffer, once connected
    bool write_soon_ = false;        // attempt_write is posted
    bool attempting_write_ = false;  // inside attempt_write's redisAsyncHandleWrite
    bool writer_writes_ = false;     // the command being queued is written by its issuer
    Direction read_{asio::posix::stream_descriptor::wait_read, &redisAsyncHandleRead};
    Direction write_{asio::posix::stream_descriptor::wait_write, &redisAsyncHandleWrite};
};

using Holder = std::shared_ptr<AsioAdapter>;

AsioAdapter& adapter(void* data) { return **static_cast<Holder*>(data); }

}  // namespace

void hold_write_attempts(::redisAsyncContext* context, bool on) {
    if (context->ev.data != nullptr) adapter(context->ev.data).hold_write_attempts(on);
}

bool attach_asio_adapter(asio::io_context& io_context, ::redisAsyncContext* context) {
    if (context->ev.data != nullptr) return false;
    try {
        context->ev.data = new Holder(std::make_shared<AsioAdapter>(io_context, context));
    } catch (const std::exception&) {  // the reactor refused the fd
        return false;
    }
    context->ev.addRead = [](void* data) { adapter(data).add_read(); };
    context->ev.delRead = [](void* data) { adapter(data).del_read(); };
    context->ev.addWrite = [](void* data) { adapter(data).add_write(); };
    context->ev.delWrite = [](void* data) { adapter(data).del_write(); };
    context->ev.cleanup = [](void* data) {
        auto* holder = static_cast<Holder*>(data);
        ::redisAsyncContext* context = (*holder)->cleanup();
        delete holder;  // pending waits keep the adapter alive until they complete
        if (context) context->ev = {};  // no hook may reach the adapter any more
    };
    return true;
}

}  // namespace sluice::redis
