// One WebSocket subscription (docs/api.md "Subscribe"): the only Beast websocket
// translation unit of http-api.
//
// Thread model: everything runs on the connection's strand (the executor of its socket).
// The Node's notify callback runs on a storage thread and posts back through the Gate;
// reads of a shard another broker leads run on the blocking pool and post back the same way.
//
// The loop, all on the strand:
//   pump():  nothing queued beyond http.ws_send_buffer_bytes, credit left, records visible
//            (below the high watermark) -> Node::fetch from `next_` -> frames -> write.
//            Caught up -> Node::notify_when_beyond(next_) (the long-poll fetch's wait), and
//            pump() again when it fires. Never a timer poll.
//   writes:  one async_write at a time, from a queue bounded by http.ws_send_buffer_bytes
//            (plus the one read that filled it).
//   reads:   the client's {"credit": N} messages; anything else closes with 4400.
//   groups:  a group subscription reads with Node::group_fetch (on the blocking pool: it may
//            sync), takes {"ack"|"nack": [...]} too (the REST calls, answered in a frame),
//            and after a short read waits for a record beyond the high watermark, a nack,
//            or its ack timeout (expired deliveries are due again).
//   watchdog: one timer, armed only while a write is pending or the subscriber has no
//            credit while records wait; either for http.ws_stall_timeout_ms closes 4408.
// A closing session drops its queue at once, keeps only the frame in flight, and gives the
// close frame http.ws_idle_timeout_ms to get out before the socket is closed under it.
#include "ws_session.h"

#include <algorithm>
#include <deque>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/json/serialize.hpp>

#include "handlers.h"
#include "problem.h"

namespace sluice::http_api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace websocket = beast::websocket;

namespace {

using Clock = std::chrono::steady_clock;

// RFC 6455 limits a close reason to 123 bytes; cut at a UTF-8 boundary.
std::string close_text(std::string s) {
  constexpr std::size_t kMax = 123;
  if (s.size() <= kMax) return s;
  std::size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

struct Frame {
  std::string data;
  bool binary = false;
};

// NextLayer: beast::tcp_stream (ws://) or an ssl_stream over one (wss://, the TLS listener's;
// its handshake is done). `tls` keeps that stream's context alive.
template <class NextLayer>
class WsSession : public std::enable_shared_from_this<WsSession<NextLayer>> {
 public:
  WsSession(NextLayer&& s, UpgradeRequest req, Subscription sub, WsContext ctx, std::shared_ptr<void> tls)
      : tls_(std::move(tls)),
        ws_(std::move(s)),
        strand_(ws_.get_executor()),
        req_(std::move(req)),
        sub_(std::move(sub)),
        ctx_(std::move(ctx)),
        next_(sub_.from),
        credit_(sub_.credit),
        watchdog_(strand_),
        redelivery_(strand_),
        close_timer_(strand_) {
    ctx_.metrics->connection_opened();
    ctx_.metrics->ws_opened();
  }
  ~WsSession() {
    ctx_.metrics->ws_buffered(-static_cast<std::int64_t>(queued_bytes_));
    ctx_.metrics->ws_closed();
    ctx_.metrics->connection_closed();
  }

  void start() {
    beast::get_lowest_layer(ws_).expires_never();  // the websocket stream keeps its own time
    websocket::stream_base::timeout t;
    t.handshake_timeout = std::min<std::chrono::milliseconds>(ctx_.cfg->ws_idle_timeout, std::chrono::seconds(30));
    t.idle_timeout = ctx_.cfg->ws_idle_timeout;
    t.keep_alive_pings = true;
    ws_.set_option(t);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "sluice"); }));
    ws_.read_message_max(kMaxClientMessage);
    ws_.auto_fragment(false);
    ws_.async_accept(req_, beast::bind_front_handler(&WsSession::on_accept, this->shared_from_this()));
  }

 private:
  void on_accept(beast::error_code ec) {
    req_ = {};
    if (ec) return end("handshake_failed");
    do_read();
    pump();
  }

  // ---- the client's messages ----
  void do_read() {
    in_.clear();
    ws_.async_read(in_, beast::bind_front_handler(&WsSession::on_read, this->shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t n) {
    ctx_.metrics->add_bytes_in(n);
    if (ec) {
      // Beast answered a frame that breaks RFC 6455 with 1002, an oversized message with
      // 1009, and a close frame with its echo; a timeout dropped a peer that went silent.
      if (ec == websocket::error::closed) return end("client_closed");
      if (ec == beast::error::timeout) return end("idle_timeout");
      if (ec == websocket::error::message_too_big) return end("bad_message");
      if (ec == websocket::condition::protocol_violation) return end("protocol_error");
      return end("disconnected");
    }
    if (closing_) return do_read();  // drained until the client's close frame arrives
    if (!ws_.got_text()) return close_with(kCloseBadMessage, "bad_message", "binary messages are not accepted");
    auto msg = parse_client_message(std::string_view(static_cast<const char*>(in_.cdata().data()), in_.size()),
                                    group());
    if (!msg) return close_with(kCloseBadMessage, "bad_message", msg.error().message);
    credit_ = std::min<std::int64_t>(kMaxCredit, credit_ + static_cast<std::int64_t>(msg->credit));
    if (credit_ > 0) starved_ = false;
    pump();
    if (msg->ack.empty() && msg->nack.empty()) return do_read();
    settle(std::move(msg->ack), std::move(msg->nack));
  }

  // A group's acks, then nacks, as the REST calls make them (on the blocking pool; they
  // sync). Each answers with a text frame: {"acked": [...]} / {"nacked": [...]}, or the
  // REST call's problem details {"ack"|"nack": [...], "problem": {...}}; a failed ack
  // changes nothing and keeps the subscription. The next client message is read after the
  // answers are queued, so a client cannot pile up calls.
  void settle(std::vector<Offset> ack, std::vector<Offset> nack) {
    if (!still_authorized()) return;
    ctx_.run_blocking([self = this->shared_from_this(), ack = std::move(ack), nack = std::move(nack)] {
      Node& n = *self->ctx_.node;
      const Subscription& s = self->sub_;
      // Acks of the subscribed incarnation's offsets must not land on a recreated stream's
      // group: the subscription ends instead. The calls are pinned to the incarnation as
      // well, so a recreate between this check and them is refused (conflict) too.
      if (auto c = check_incarnation(n, s); !c)
        return self->post([self, e = c.error()] { self->close_error(e); });
      std::vector<std::string> answers;
      bool nacked = false;
      for (const bool is_ack : {true, false}) {
        const auto& offs = is_ack ? ack : nack;
        if (offs.empty()) continue;
        auto r = is_ack ? n.group_ack(s.key, s.shard, s.group, offs, s.incarnation)
                        : n.group_nack(s.key, s.shard, s.group, offs, s.incarnation);
        boost::json::array a;
        for (auto o : offs) a.push_back(o.value());
        const std::string list = boost::json::serialize(a);
        if (r) answers.push_back(std::string("{\"") + (is_ack ? "acked" : "nacked") + "\":" + list + "}");
        else answers.push_back(std::string("{\"") + (is_ack ? "ack" : "nack") + "\":" + list +
                               ",\"problem\":" + problem(r.error()).body + "}");
        nacked = nacked || (!is_ack && r);
      }
      self->post([self, answers = std::move(answers), nacked]() mutable {
        if (self->closing_ || self->ended_) return;
        for (auto& a : answers) self->enqueue(Frame{std::move(a), false});
        if (nacked) self->beyond_ = true;  // nacked records are delivered again
        self->do_write();
        self->pump();
        self->resume_read();
      });
    });
  }

  // The client's next message is read only while the send buffer has room. The answers to
  // its acks are queued whatever the buffer holds (pump() alone respects it), so a client
  // that sent acks and never read would otherwise grow it without bound (review finding).
  // on_write() resumes the read once the buffer drains below the limit.
  void resume_read() {
    if (queued_bytes_ >= ctx_.cfg->ws_send_buffer_bytes) {
      read_paused_ = true;
      return;
    }
    read_paused_ = false;
    do_read();
  }

  // ---- reading the shard ----
  // Records beyond next_ are known to be visible.
  bool records_wait() const { return beyond_ || (hwm_known_ && next_.value() < hwm_.value()); }

  void pump() {
    if (closing_ || reading_) return;
    if (queued_bytes_ >= ctx_.cfg->ws_send_buffer_bytes) return;  // on_write pumps again
    if (credit_ <= 0 && !records_wait()) return await_records();
    if (credit_ <= 0) {
      if (!starved_) {
        starved_ = true;
        starved_since_ = Clock::now();
        arm_watchdog();
      }
      return;
    }
    // Before the first read the high watermark is unknown: read (an empty answer tells it).
    if (hwm_known_ && !records_wait()) return await_records();
    read();
  }

  bool group() const { return !sub_.group.empty(); }

  // The token that opened the subscription, against the tokens in force now: a reload that
  // revoked it (or took the grant away) ends the subscription at its next read or ack
  // with 1008 (review finding: it streamed on for as long as it lived).
  bool still_authorized() {
    if (!sub_.still_authorized || sub_.still_authorized()) return true;
    close_with(1008, "unauthorized", "the token was revoked or no longer allows this subscription");
    return false;
  }

  void read() {
    if (!still_authorized()) return;
    reading_ = true;
    if (group()) return read_group();
    const Offset from = next_;
    const auto max = static_cast<std::uint32_t>(std::min<std::int64_t>(credit_, kMaxRecordsPerFrame));
    const std::size_t room = ctx_.cfg->ws_send_buffer_bytes - queued_bytes_;
    const std::size_t max_bytes = std::max<std::size_t>(1, std::min(ctx_.cfg->fetch_max_bytes, room));
    // Asked at every read: the leader may have moved since the subscription began, and a
    // read forwarded to the new one must not block this I/O thread (review finding).
    if (!sub_.remote && ctx_.node->serves_locally(sub_.key, sub_.shard))
      return on_fetched(from, max, fetch_pinned(*ctx_.node, sub_, from, max, max_bytes));
    // Another broker leads: the read is a round trip to it, off the I/O thread.
    ctx_.run_blocking([self = this->shared_from_this(), from, max, max_bytes] {
      auto r = fetch_pinned(*self->ctx_.node, self->sub_, from, max, max_bytes);
      self->post([self, from, max, r = std::move(r)]() mutable { self->on_fetched(from, max, std::move(r)); });
    });
  }

  // A read of the subscribed incarnation only. Without the checks, a subscriber that held
  // no credit while the stream was deleted and created again read the new stream at its
  // old offset, as if one continued the other (review finding).
  static Result<FetchResult> fetch_pinned(Node& n, const Subscription& s, Offset from, std::uint32_t max,
                                          std::size_t max_bytes) {
    if (auto c = check_incarnation(n, s); !c) return c.error();
    auto r = n.fetch(s.key, s.shard, from, max, max_bytes);
    if (auto c = check_incarnation(n, s); !c) return c.error();
    return r;
  }

  void on_fetched(Offset from, std::uint32_t max, Result<FetchResult> r) {
    reading_ = false;
    if (closing_) return;
    if (!r) return close_error(r.error());
    hwm_ = r->high_watermark;
    hwm_known_ = true;
    beyond_ = false;
    if (sub_.binary) {
      for (auto& b : r->batches) {
        if (credit_ <= 0) break;
        if (b.size() < kBatchHeaderSize) return close_error(Error(Errc::corrupt_data, "fetch returned a truncated batch"));
        const BatchHeader h = BatchHeader::decode(b.data());
        if (h.next_offset() <= next_.value()) continue;
        // The whole batch is charged, so credit may go below zero by one batch.
        credit_ -= static_cast<std::int64_t>(h.next_offset() - std::max(next_.value(), h.base_offset));
        next_ = Offset{h.next_offset()};
        enqueue(Frame{std::move(b), true});
      }
    } else {
      auto page = render_records(*r, from, max);
      if (!page) return close_error(page.error());
      next_ = page->next_offset;
      if (page->count) {
        credit_ -= static_cast<std::int64_t>(page->count);
        enqueue(Frame{boost::json::serialize(page->body), false});
      }
    }
    // Storage returns at least one batch below the high watermark; never spin on nothing.
    if (next_.value() == from.value() && from.value() < hwm_.value())
      return close_error(Error(Errc::internal, "a read below the high watermark returned no record"));
    do_write();
    pump();
  }

  // A group delivery (on the blocking pool: it may sync). The high watermark is taken
  // first, so a record published meanwhile is either delivered or beyond it.
  void read_group() {
    const auto max = static_cast<std::uint32_t>(std::min<std::int64_t>(credit_, kMaxRecordsPerFrame));
    ctx_.run_blocking([self = this->shared_from_this(), max] {
      Node& n = *self->ctx_.node;
      const Subscription& s = self->sub_;
      // Pinned like a shard read (fetch_pinned): a group of the new incarnation is another
      // group, which this subscription must neither create nor take deliveries of.
      auto st = [&]() -> Result<ShardStats> {
        if (auto c = check_incarnation(n, s); !c) return c.error();
        return n.shard_stats(s.key, s.shard);
      }();
      Result<GroupDelivery> r =
          st ? n.group_fetch(s.key, s.shard, s.group, max, s.opts, s.incarnation) : Result<GroupDelivery>(st.error());
      if (auto c = check_incarnation(n, s); !c) r = c.error();  // a recreate: 4404, whatever the fetch said
      const Offset hwm = st ? st->high_watermark : Offset{0};
      self->post([self, max, hwm, r = std::move(r)]() mutable { self->on_group_fetched(max, hwm, std::move(r)); });
    });
  }

  void on_group_fetched(std::uint32_t max, Offset hwm, Result<GroupDelivery> r) {
    reading_ = false;
    if (closing_) return;
    if (!r) return close_error(r.error());
    const std::size_t n = r->records.size();
    if (n) {
      credit_ -= static_cast<std::int64_t>(n);
      auto body = delivery_json(*r);
      body["incarnation"] = sub_.incarnation.value();  // as the group fetch answers
      enqueue(Frame{boost::json::serialize(body), false});
    }
    // A full read may have left more, and so may one a bound stopped (`more`: bytes,
    // scanned bytes, dead-letter moves; read as caught up, records ready below `hwm` waited
    // for an ack timeout). Otherwise it delivered all there was below `hwm`: wait for a
    // record beyond it, a nack, or the redelivery of an expired one.
    beyond_ = n >= max || r->more;
    hwm_known_ = true;
    hwm_ = hwm;
    next_ = hwm;
    if (!beyond_) arm_redelivery();
    do_write();
    pump();
  }

  // Deliveries not acked within ack_timeout_ms are due again; nothing announces them, so an
  // idle group subscription reads once per ack timeout.
  void arm_redelivery() {
    if (redelivery_armed_) return;
    redelivery_armed_ = true;
    redelivery_.expires_after(std::chrono::milliseconds(sub_.opts.ack_timeout_ms));
    redelivery_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      self->redelivery_armed_ = false;
      if (ec || self->closing_) return;
      self->beyond_ = true;
      self->pump();
    });
  }

  // Caught up: the long-poll fetch's wait, until a record beyond next_ is visible.
  void await_records() {
    if (notify_armed_) return;
    notify_armed_ = true;
    std::weak_ptr<WsSession> w = this->weak_from_this();
    // Runs on a storage thread. The reference it takes is dropped inside the gate: if it
    // was the last one, the session (its socket and timers) is destroyed while the
    // io_context still lives. Taken outside, a stop() in between left this thread to
    // destroy it against a dead io_context (review; session.cc on_session does the same).
    auto h = ctx_.node->notify_when_beyond(sub_.key, sub_.shard, next_, [w, gate = ctx_.gate] {
      std::lock_guard lk(gate->mu);
      if (!gate->open) return;
      if (auto s = w.lock()) net::post(s->strand_, [s] { s->on_notify(); });
    });
    if (!h) {
      notify_armed_ = false;
      return close_error(h.error());
    }
    notify_handle_ = *h;
    // The wait is routed by name: armed after a delete and recreate, it waits on the new
    // stream's log at this one's offset, and nothing may ever fire (review finding).
    if (auto c = check_incarnation(*ctx_.node, sub_); !c) {
      cancel_notify();
      notify_armed_ = false;
      return close_error(c.error());
    }
  }

  void on_notify() {
    notify_armed_ = false;
    notify_handle_ = 0;
    beyond_ = true;  // data beyond next_, or the shard closed (the next read says which)
    pump();
  }

  void cancel_notify() {
    if (notify_handle_) ctx_.node->cancel_notify(sub_.key, sub_.shard, std::exchange(notify_handle_, 0));
  }

  // From any thread: runs `fn` on the strand unless the server stopped.
  template <class F>
  void post(F fn) {
    std::lock_guard lk(ctx_.gate->mu);
    if (!ctx_.gate->open) return;
    net::post(strand_, std::move(fn));
  }

  // ---- writing ----
  void enqueue(Frame f) {
    queued_bytes_ += f.data.size();
    ctx_.metrics->ws_buffered(static_cast<std::int64_t>(f.data.size()));
    queue_.push_back(std::move(f));
  }

  void do_write() {
    if (writing_ || queue_.empty()) return;
    writing_ = true;
    write_started_ = Clock::now();
    ws_.binary(queue_.front().binary);
    ws_.async_write(net::buffer(queue_.front().data),
                    beast::bind_front_handler(&WsSession::on_write, this->shared_from_this()));
    arm_watchdog();
  }

  void on_write(beast::error_code ec, std::size_t n) {
    writing_ = false;
    ctx_.metrics->add_bytes_out(n);
    const std::size_t size = queue_.front().data.size();
    queue_.pop_front();
    queued_bytes_ -= size;
    ctx_.metrics->ws_buffered(-static_cast<std::int64_t>(size));
    if (ec) return end("disconnected");
    ctx_.metrics->ws_frame_sent();
    // (While closing, async_close reads up to the client's close frame itself.)
    if (read_paused_ && !closing_ && queued_bytes_ < ctx_.cfg->ws_send_buffer_bytes) {
      read_paused_ = false;
      do_read();
    }
    if (closing_) return;
    do_write();
    pump();
  }

  // ---- stalls and closes ----
  void arm_watchdog() {
    if (watchdog_armed_ || closing_) return;
    auto deadline = Clock::time_point::max();
    if (writing_) deadline = std::min(deadline, write_started_ + ctx_.cfg->ws_stall_timeout);
    if (starved_) deadline = std::min(deadline, starved_since_ + ctx_.cfg->ws_stall_timeout);
    if (deadline == Clock::time_point::max()) return;
    watchdog_armed_ = true;
    watchdog_.expires_at(deadline);
    watchdog_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      self->watchdog_armed_ = false;
      if (!ec) self->on_watchdog();
    });
  }

  void on_watchdog() {
    if (closing_) return;
    const auto now = Clock::now();
    const auto limit = std::to_string(ctx_.cfg->ws_stall_timeout.count()) + " ms";
    if (writing_ && now - write_started_ >= ctx_.cfg->ws_stall_timeout)
      return close_with(kCloseSlowConsumer, "slow_consumer", "slow consumer: a frame has not been read for " + limit);
    if (starved_ && now - starved_since_ >= ctx_.cfg->ws_stall_timeout)
      return close_with(kCloseSlowConsumer, "slow_consumer",
                        "slow consumer: no credit for " + limit + " while records wait");
    arm_watchdog();
  }

  // A read error after the upgrade: 4000 + its HTTP status, reason "code: detail".
  void close_error(const Error& e) {
    close_with(static_cast<std::uint16_t>(kCloseErrorBase + http_status(e.code)), "read_error",
               std::string(errc_name(e.code)) + ": " + e.message);
  }

  void close_with(std::uint16_t code, const std::string& reason, std::string text) {
    if (closing_ || ended_) return;
    closing_ = true;
    ctx_.metrics->ws_close_reason(reason);
    counted_ = true;
    cancel_notify();
    watchdog_.cancel();
    redelivery_.cancel();
    // Only the frame in flight stays: a closing subscriber holds no more memory than that.
    while (queue_.size() > (writing_ ? 1u : 0u)) {
      queued_bytes_ -= queue_.back().data.size();
      ctx_.metrics->ws_buffered(-static_cast<std::int64_t>(queue_.back().data.size()));
      queue_.pop_back();
    }
    // The close frame goes out after the frame in flight; a peer that never reads it is
    // cut off after the idle timeout.
    close_timer_.expires_after(ctx_.cfg->ws_idle_timeout);
    close_timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->hard_close();
    });
    ws_.async_close(websocket::close_reason(static_cast<websocket::close_code>(code), close_text(std::move(text))),
                    [self = this->shared_from_this()](beast::error_code) { self->hard_close(); });
  }

  void hard_close() {
    close_timer_.cancel();
    watchdog_.cancel();
    redelivery_.cancel();
    beast::get_lowest_layer(ws_).close();
  }

  // The connection is over (or failing): count why, once, and let go of everything.
  void end(const char* reason) {
    if (ended_) return;
    ended_ = true;
    closing_ = true;  // a read or an ack still on the pool finds the session over
    if (!counted_) ctx_.metrics->ws_close_reason(reason);
    counted_ = true;
    cancel_notify();
    hard_close();
  }

  std::shared_ptr<void> tls_;  // before ws_, which uses it
  websocket::stream<NextLayer> ws_;
  net::any_io_executor strand_;
  UpgradeRequest req_;
  Subscription sub_;
  WsContext ctx_;
  beast::flat_buffer in_;

  Offset next_;            // the next offset to deliver
  Offset hwm_{0};          // the high watermark the last read saw
  bool hwm_known_ = false; // a read has happened
  bool beyond_ = false;    // the Node said records beyond next_ are visible
  std::int64_t credit_;    // records the client still accepts
  bool reading_ = false;
  bool notify_armed_ = false;
  std::uint64_t notify_handle_ = 0;

  std::deque<Frame> queue_;  // front() is being written while writing_
  std::size_t queued_bytes_ = 0;
  bool read_paused_ = false;  // the client's messages wait for room (resume_read)
  bool writing_ = false;
  Clock::time_point write_started_;
  bool starved_ = false;  // no credit while records wait
  Clock::time_point starved_since_;

  net::steady_timer watchdog_;
  bool watchdog_armed_ = false;
  net::steady_timer redelivery_;  // group subscriptions only
  bool redelivery_armed_ = false;
  net::steady_timer close_timer_;
  bool closing_ = false;  // our close frame is queued
  bool ended_ = false;
  bool counted_ = false;  // a close reason was counted
};

}  // namespace

bool is_websocket_upgrade(const http::request_header<>& req) { return websocket::is_upgrade(req); }

void start_websocket(beast::tcp_stream stream, UpgradeRequest req, Subscription sub, WsContext ctx) {
  std::make_shared<WsSession<beast::tcp_stream>>(std::move(stream), std::move(req), std::move(sub), std::move(ctx),
                                                 nullptr)
      ->start();
}

void start_websocket(beast::ssl_stream<beast::tcp_stream> stream, UpgradeRequest req, Subscription sub,
                     WsContext ctx, std::shared_ptr<boost::asio::ssl::context> tls) {
  std::make_shared<WsSession<beast::ssl_stream<beast::tcp_stream>>>(std::move(stream), std::move(req),
                                                                    std::move(sub), std::move(ctx), std::move(tls))
      ->start();
}

}  // namespace sluice::http_api
