#include "raft_node.h"

#include "cluster_transport.h"

#include <pthread.h>
#include <uv.h>

#include <cstring>

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace sluice::raft_meta {

// The function `raft_apply` hides `struct raft_apply` (docs/dependencies.md).
using ApplyReq = struct raft_apply;

std::string_view to_string(RaftRole r) {
  switch (r) {
    case RaftRole::unavailable: return "unavailable";
    case RaftRole::follower: return "follower";
    case RaftRole::candidate: return "candidate";
    case RaftRole::leader: return "leader";
  }
  return "unavailable";
}

namespace {

Error status_error(int status, const char* what) {
  std::string msg = std::string(what) + ": " + raft_strerror(status);
  if (status == RAFT_NOTLEADER) return Error(Errc::not_leader, msg, Outcome::transient);
  // Leadership lost / shutdown after the entry was appended: it may still commit.
  return Error(Errc::unavailable, msg, Outcome::uncertain);
}

RaftRole role_of(int state) {
  switch (state) {
    case RAFT_FOLLOWER: return RaftRole::follower;
    case RAFT_CANDIDATE: return RaftRole::candidate;
    case RAFT_LEADER: return RaftRole::leader;
    default: return RaftRole::unavailable;
  }
}

}  // namespace

// Everything here runs on the raft thread unless stated otherwise. A nested struct of
// RaftNode, so it may touch the node's private members.
struct RaftNode::Impl {
  RaftNode* node = nullptr;
  uv_loop_t loop{};
  uv_async_t async{};
  uv_timer_t timer{};
  struct raft_uv_transport transport{};
  struct raft_io io{};
  struct raft_fsm fsm{};
  struct raft raft{};
  bool raft_inited = false;
  bool closing = false;
  // A step-down in flight (step_down_wanted). Stored here, never freed while the node
  // lives: libraft 0.15 sends TimeoutNow with the request's embedded raft_io_send, which
  // may still be in flight when the transfer's callback runs.
  struct raft_transfer transfer_req{};
  bool transferring = false;
  int last_transfer_rv = 0;  // logged once per distinct failure
  bool step_down_logged = false;  // once per stretch of step_down_wanted
  bool cluster_transport_ = false;
  static void close_transport(Impl* self) {
    if (self->cluster_transport_)
      cluster_transport_close(&self->transport);
    else
      raft_uv_tcp_close(&self->transport);
  }
  // Results of applied entries, by index, until the proposer's callback claims them. Kept
  // only while this node has proposals in flight (applies_in_flight): a follower, or a
  // replay at start, keeps none (one result may carry a 1,024-shard stream's assignments,
  // and nobody would claim them; review finding).
  std::map<std::uint64_t, ApplyResult> results;
  std::uint64_t applies_in_flight = 0;  // raft_apply accepted, apply_cb not run yet

  // One caller's proposal (RaftNode::apply).
  struct Proposal {
    std::promise<Result<ApplyResult>> done;
    std::string entry;
    bool batchable = false;
  };
  // One raft entry in flight: a lone proposal, or several combined (options.combine).
  struct ApplyOp {
    ApplyReq req{};
    Impl* impl = nullptr;
    std::vector<std::unique_ptr<Proposal>> props;
    bool combined = false;
  };
  // Group commit: batchable proposals held while the leader's last append is being
  // written, proposed together once it is stored (flush_pending, from the check handle).
  uv_check_t check{};
  std::deque<std::unique_ptr<Proposal>> pending;
  std::uint64_t pending_since = 0;  // uv_now when the oldest pending proposal arrived (about)
  struct BarrierOp {
    struct raft_barrier req{};
    std::promise<Result<void>> done;
  };
  // A membership change: raft_add, then raft_assign (add_voter), or raft_remove.
  struct ChangeOp {
    struct raft_change req{};
    std::promise<Result<void>> done;
    Impl* impl = nullptr;
    std::uint64_t id = 0;
    bool then_assign = false;
  };

  // --- FSM (fsm version 1) ---
  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
    auto* self = static_cast<Impl*>(fsm->data);
    // libraft applies entries in order and sets last_applied after the FSM returns, so
    // this entry's index is last_applied + 1. The buffer stays raft's: never free it.
    std::uint64_t index = raft_last_applied(&self->raft) + 1;
    ApplyResult r = self->node->sm_.apply(
        index, std::string_view(static_cast<const char*>(buf->base), buf->len));
    // Results nobody claims (entries proposed elsewhere while this node has its own in
    // flight) are dropped once they are far behind; with none in flight none is kept.
    // (fsm_apply and apply_cb both run on the raft thread.)
    if (self->applies_in_flight == 0) {
      self->results.clear();
    } else {
      if (index > 4096) self->results.erase(self->results.begin(), self->results.lower_bound(index - 4096));
      self->results[index] = std::move(r);
    }
    self->node->last_applied_.store(index);
    *result = nullptr;
    return 0;
  }

  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs) {
    auto* self = static_cast<Impl*>(fsm->data);
    std::string image = self->node->sm_.snapshot();
    if (image.empty()) return RAFT_NOMEM;
    // fsm version 1: libraft takes ownership of both allocations.
    auto* arr = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
    if (!arr) return RAFT_NOMEM;
    arr[0].base = raft_malloc(image.size());
    if (!arr[0].base) {
      raft_free(arr);
      return RAFT_NOMEM;
    }
    std::memcpy(arr[0].base, image.data(), image.size());
    arr[0].len = image.size();
    *bufs = arr;
    *n_bufs = 1;
    return 0;
  }

  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
    auto* self = static_cast<Impl*>(fsm->data);
    auto r = self->node->sm_.restore(
        std::string_view(static_cast<const char*>(buf->base), buf->len));
    if (!r.ok()) {
      self->node->log(LogLevel::error, "snapshot restore failed: " + r.error().to_string());
      return RAFT_CORRUPT;  // on failure libraft keeps the buffer
    }
    raft_free(buf->base);  // on success the buffer is ours to free (§10)
    return 0;
  }

  // --- request callbacks ---
  static void apply_cb(ApplyReq* req, int status, void* /*result*/) {
    auto* op = static_cast<ApplyOp*>(req->data);
    std::unique_ptr<ApplyOp> own(op);
    --op->impl->applies_in_flight;
    if (status != 0) {
      for (auto& p : op->props) p->done.set_value(status_error(status, "apply"));
      return;
    }
    auto it = op->impl->results.find(req->index);
    if (it == op->impl->results.end()) {
      for (auto& p : op->props) p->done.set_value(Error(Errc::internal, "applied entry has no result", Outcome::uncertain));
      return;
    }
    ApplyResult r = std::move(it->second);
    op->impl->results.erase(it);
    if (!op->combined) {
      op->props[0]->done.set_value(std::move(r));
      return;
    }
    if (r.inner.size() == op->props.size()) {
      for (std::size_t i = 0; i < op->props.size(); ++i) op->props[i]->done.set_value(std::move(r.inner[i]));
      return;
    }
    if (r.error && r.error->code == Errc::conflict) {
      // Refused as a whole (the group had a member below the batch level after all):
      // nothing of it was applied, so each proposal goes again as its own entry, ahead of
      // the proposals still pending.
      for (auto p = op->props.rbegin(); p != op->props.rend(); ++p) {
        (*p)->batchable = false;
        op->impl->pending.push_front(std::move(*p));
      }
      return;
    }
    for (auto& p : op->props)
      p->done.set_value(r.error ? Result<ApplyResult>(*r.error)
                                : Result<ApplyResult>(Error(Errc::internal, "combined entry has no results", Outcome::uncertain)));
  }

  static void barrier_cb(struct raft_barrier* req, int status) {
    auto* op = static_cast<BarrierOp*>(req->data);
    if (status != 0)
      op->done.set_value(status_error(status, "barrier"));
    else
      op->done.set_value(ok_result());
    delete op;
  }

  static void change_cb(struct raft_change* req, int status) {
    auto* op = static_cast<ChangeOp*>(req->data);
    if (status != 0) {
      op->done.set_value(status_error(status, "membership change"));
      delete op;
      return;
    }
    if (op->then_assign) {
      op->then_assign = false;
      op->req = {};
      op->req.data = op;
      int rv = raft_assign(&op->impl->raft, &op->req, op->id, RAFT_VOTER, change_cb);
      if (rv != 0) {
        op->done.set_value(Error(rv == RAFT_NOTLEADER ? Errc::not_leader : Errc::unavailable,
                                 std::string("raft_assign: ") + raft_strerror(rv)));
        delete op;
      }
      return;
    }
    op->done.set_value(ok_result());
    delete op;
  }

  void do_add_voter(ChangeOp* op, const std::string& address, bool closing_now) {
    if (closing_now) {
      op->done.set_value(Error(Errc::unavailable, "raft node is stopping"));
      delete op;
      return;
    }
    // Already in the configuration: at the same address, promote if needed.
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      const auto& srv = raft.configuration.servers[i];
      if (srv.id != op->id) continue;
      if (address != srv.address) {
        op->done.set_value(Error(Errc::conflict, "server " + std::to_string(op->id) +
                                                     " is already in the configuration at " +
                                                     srv.address));
        delete op;
        return;
      }
      if (srv.role == RAFT_VOTER) {
        op->done.set_value(ok_result());
        delete op;
        return;
      }
      op->then_assign = false;
      op->req.data = op;
      int rv = raft_assign(&raft, &op->req, op->id, RAFT_VOTER, change_cb);
      if (rv != 0) {
        op->done.set_value(Error(rv == RAFT_NOTLEADER ? Errc::not_leader : Errc::unavailable,
                                 std::string("raft_assign: ") + raft_strerror(rv)));
        delete op;
      }
      return;
    }
    op->then_assign = true;
    op->req.data = op;
    int rv = raft_add(&raft, &op->req, op->id, address.c_str(), change_cb);
    if (rv != 0) {
      op->done.set_value(Error(rv == RAFT_NOTLEADER ? Errc::not_leader : Errc::unavailable,
                               std::string("raft_add: ") + raft_strerror(rv)));
      delete op;
    }
  }

  void do_remove(ChangeOp* op, bool closing_now) {
    if (closing_now) {
      op->done.set_value(Error(Errc::unavailable, "raft node is stopping"));
      delete op;
      return;
    }
    op->req.data = op;
    int rv = raft_remove(&raft, &op->req, op->id, change_cb);
    if (rv != 0) {
      op->done.set_value(Error(rv == RAFT_NOTLEADER ? Errc::not_leader
                               : rv == RAFT_BADID  ? Errc::not_found
                                                   : Errc::unavailable,
                               std::string("raft_remove: ") + raft_strerror(rv)));
      delete op;
    }
  }

  // --- loop plumbing ---
  void refresh_status() {
    if (!raft_inited || closing) return;
    node->role_.store(role_of(raft_state(&raft)));
    node->last_applied_.store(raft_last_applied(&raft));
    node->commit_index_.store(raft.commit_index);
    raft_id id = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &id, &addr);
    node->leader_id_.store(id);
    maybe_step_down();
  }

  void maybe_step_down() {
    const auto& want = node->opts_.step_down_wanted;
    if (!want) return;
    if (!want()) {
      step_down_logged = false;
      return;
    }
    if (transferring || raft_state(&raft) != RAFT_LEADER) return;
    std::memset(&transfer_req, 0, sizeof transfer_req);
    transfer_req.data = this;
    const int rv = raft_transfer(&raft, &transfer_req, 0, transfer_cb);
    if (rv != 0) {
      if (rv != last_transfer_rv)
        node->log(LogLevel::warn, std::string("this leader cannot serve and cannot hand leadership over: ") +
                                      raft_strerror(rv) + " (no voting follower?)");
      last_transfer_rv = rv;
      return;
    }
    last_transfer_rv = 0;
    transferring = true;
    // Once per stretch: if every voter is held, leadership goes round them at each
    // election timeout, and each round would log again.
    if (!step_down_logged)
      node->log(LogLevel::warn, "this leader cannot serve (held); handing leadership to another voter");
    step_down_logged = true;
  }

  static void transfer_cb(struct raft_transfer* t) { static_cast<Impl*>(t->data)->transferring = false; }

  static void timer_cb(uv_timer_t* t) { static_cast<Impl*>(t->data)->refresh_status(); }

  // Runs after every round of I/O callbacks, so right after the append that held the
  // pending proposals completes.
  static void check_cb(uv_check_t* c) {
    auto* self = static_cast<Impl*>(c->data);
    if (!self->closing) self->flush_pending();
  }

  void close_handles() {
    uv_timer_stop(&timer);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer), nullptr);
    uv_check_stop(&check);
    uv_close(reinterpret_cast<uv_handle_t*>(&check), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&async), nullptr);
  }

  static void raft_close_cb(struct raft* r) {
    auto* self = static_cast<Impl*>(r->data);
    // docs/dependencies.md: close the uv io and transport in raft's close callback.
    raft_uv_close(&self->io);
    close_transport(self);
    self->close_handles();
  }

  // Runs queued tasks; on a stop request begins raft_close (never from an apply callback).
  static void async_cb(uv_async_t* a) {
    auto* self = static_cast<Impl*>(a->data);
    RaftNode* n = self->node;
    std::deque<std::function<void(bool)>> tasks;
    bool stop_now = false;
    {
      std::lock_guard lk(n->q_mu_);
      tasks.swap(n->queue_);
      if (n->stopping_.load() && n->accepting_) {
        n->accepting_ = false;  // no uv_async_send after this point
        stop_now = true;
      }
    }
    for (auto& t : tasks) t(self->closing || stop_now);
    if (stop_now || self->closing) {
      for (auto& p : self->pending) p->done.set_value(Error(Errc::unavailable, "raft node is stopping"));
      self->pending.clear();
    }
    if (stop_now && !self->closing) {
      self->closing = true;
      n->role_.store(RaftRole::unavailable);
      if (self->raft_inited) {
        raft_close(&self->raft, raft_close_cb);
      } else {
        self->close_handles();
      }
    }
  }

  // Apply/barrier tasks (run by async_cb).
  void do_apply(std::unique_ptr<Proposal> p, bool closing_now) {
    if (closing_now) {
      p->done.set_value(Error(Errc::unavailable, "raft node is stopping"));
      return;
    }
    if (!p->batchable || !node->opts_.combine) {
      p->batchable = false;
      propose(std::vector<std::unique_ptr<Proposal>>{}, std::move(p));
      return;
    }
    if (pending.empty()) pending_since = uv_now(&loop);
    pending.push_back(std::move(p));
    flush_pending();
  }

  // Whether the leader's last append is still being written (libraft then gathers new
  // entries for the next write anyway; holding batchable proposals until it is stored lets
  // them share one entry).
  bool append_in_flight() {
    return raft_state(&raft) == RAFT_LEADER && raft.last_stored < raft_last_index(&raft);
  }

  // Proposes what is pending, unless an append is in flight: a lone proposal as itself,
  // several as one combined entry (bounded by count and bytes; the rest waits for the
  // append this one starts).
  void flush_pending() {
    // A safety valve, not a tuning knob: proposals never wait more than a few timer ticks
    // for an append that does not finish (a slow disk then just stops batching them).
    constexpr std::uint64_t kMaxHoldMs = 50;
    while (!pending.empty() && (!append_in_flight() || uv_now(&loop) - pending_since >= kMaxHoldMs)) {
      std::vector<std::unique_ptr<Proposal>> take;
      std::size_t bytes = 0;
      const auto& o = node->opts_;
      while (!pending.empty() && pending.front()->batchable && take.size() < o.max_batch_commands &&
             (take.empty() || bytes + pending.front()->entry.size() + 1 <= o.max_batch_bytes)) {
        bytes += pending.front()->entry.size() + 1;
        take.push_back(std::move(pending.front()));
        pending.pop_front();
      }
      if (take.empty()) {  // a proposal that must go alone
        auto p = std::move(pending.front());
        pending.pop_front();
        propose({}, std::move(p));
      } else if (take.size() == 1) {
        propose({}, std::move(take[0]));
      } else if (o.may_combine && !o.may_combine()) {
        for (auto& p : take) propose({}, std::move(p));
      } else {
        propose(std::move(take), nullptr);
      }
      pending_since = uv_now(&loop);
    }
  }

  // One raft entry: `lone`, or the `combined` proposals as options.combine builds them.
  void propose(std::vector<std::unique_ptr<Proposal>> combined, std::unique_ptr<Proposal> lone) {
    auto op = std::make_unique<ApplyOp>();
    op->impl = this;
    std::string entry;
    if (lone) {
      entry = std::move(lone->entry);
      op->props.push_back(std::move(lone));
    } else {
      std::vector<std::string> parts;
      parts.reserve(combined.size());
      for (auto& p : combined) parts.push_back(std::move(p->entry));
      entry = node->opts_.combine(parts);
      // Kept: a combined entry refused as a whole proposes each part again, alone.
      for (std::size_t i = 0; i < combined.size(); ++i) combined[i]->entry = std::move(parts[i]);
      op->props = std::move(combined);
      op->combined = true;
    }
    // libraft's uv segment encoder assumes every entry is a multiple of 8 bytes long; an
    // unaligned entry is written fine but misread at the next start ("entries count in
    // preamble is too high"). Pad with ASCII spaces, which the JSON command decoder skips.
    const std::size_t padded = entry.empty() ? 8 : entry.size() + (8 - entry.size() % 8) % 8;
    struct raft_buffer buf;
    buf.len = padded;
    buf.base = raft_malloc(padded);
    if (!buf.base) {
      for (auto& p : op->props) p->done.set_value(Error(Errc::unavailable, "out of memory"));
      return;
    }
    std::memcpy(buf.base, entry.data(), entry.size());
    std::memset(static_cast<char*>(buf.base) + entry.size(), ' ', padded - entry.size());
    if (!op->combined) op->props[0]->entry = std::move(entry);
    op->req.data = op.get();
    int rv = raft_apply(&raft, &op->req, &buf, 1, apply_cb);
    if (rv != 0) {
      raft_free(buf.base);  // not raft's unless raft_apply returned 0 (§10)
      for (auto& p : op->props)
        p->done.set_value(Error(rv == RAFT_NOTLEADER ? Errc::not_leader : Errc::unavailable,
                                std::string("raft_apply: ") + raft_strerror(rv), Outcome::transient));
      return;
    }
    ++applies_in_flight;
    op.release();  // libraft's until apply_cb
  }

  void do_barrier(BarrierOp* op, bool closing_now) {
    if (closing_now) {
      op->done.set_value(Error(Errc::unavailable, "raft node is stopping"));
      delete op;
      return;
    }
    op->req.data = op;
    int rv = raft_barrier(&raft, &op->req, barrier_cb);
    if (rv != 0) {
      op->done.set_value(Error(rv == RAFT_NOTLEADER ? Errc::not_leader : Errc::unavailable,
                               std::string("raft_barrier: ") + raft_strerror(rv),
                               Outcome::transient));
      delete op;
    }
  }

  // Opens io/transport/raft, bootstraps on first start, raft_start. On failure everything
  // opened so far is being closed and the loop must still be run to finish closing.
  Result<void> open() {
    const RaftNodeOptions& o = node->opts_;
    int rv = uv_timer_init(&loop, &timer);
    if (rv == 0) rv = uv_async_init(&loop, &async, async_cb);
    if (rv == 0) rv = uv_check_init(&loop, &check);
    if (rv == 0) rv = uv_check_start(&check, check_cb);
    if (rv != 0) return Error(Errc::internal, std::string("uv init: ") + uv_strerror(rv));
    timer.data = this;
    async.data = this;
    check.data = this;

    // Every connection between members presents the cluster id first (cluster_transport.h);
    // without a cluster id source (tests of a lone node), libraft's stock TCP transport.
    cluster_transport_ = static_cast<bool>(o.cluster_id);
    if (cluster_transport_) {
      ClusterTransportOptions topts;
      topts.secret = o.cluster_secret;
      topts.require_auth = o.require_auth;
      rv = cluster_transport_init(&transport, &loop, o.cluster_id,
                                  [n = node](LogLevel l, const std::string& m) { n->log(l, m); },
                                  topts);
    } else {
      rv = raft_uv_tcp_init(&transport, &loop);
    }
    if (rv != 0) {
      close_handles();
      return Error(Errc::storage_failure, std::string("transport init: ") + raft_strerror(rv));
    }
    rv = raft_uv_init(&io, &loop, o.dir.c_str(), &transport);
    if (rv != 0) {
      std::string msg = std::string("raft_uv_init(") + o.dir + "): " + io.errmsg;
      close_transport(this);
      close_handles();
      return Error(Errc::storage_failure, msg);
    }
    // Uncompressed snapshots: the snapshot file is the catalog's SQLite image verbatim
    // (README.md, "Opening a snapshot").
    raft_uv_set_snapshot_compression(&io, false);

    fsm.version = 1;
    fsm.data = this;
    fsm.apply = fsm_apply;
    fsm.snapshot = fsm_snapshot;
    fsm.restore = fsm_restore;
    rv = raft_init(&raft, &io, &fsm, o.id, o.address.c_str());
    if (rv != 0) {
      std::string msg = std::string("raft_init: ") + raft_errmsg(&raft);
      raft_uv_close(&io);
      close_transport(this);
      close_handles();
      return Error(Errc::storage_failure, msg);
    }
    raft.data = this;
    raft_inited = true;
    raft_set_election_timeout(&raft, o.election_timeout_ms);
    raft_set_heartbeat_timeout(&raft, o.heartbeat_timeout_ms);
    raft_set_snapshot_threshold(&raft, o.snapshot_threshold);
    raft_set_snapshot_trailing(&raft, o.snapshot_trailing);

    struct raft_configuration conf;
    raft_configuration_init(&conf);
    rv = raft_configuration_add(&conf, o.id, o.address.c_str(), RAFT_VOTER);
    if (rv == 0) rv = o.bootstrap ? raft_bootstrap(&raft, &conf) : RAFT_CANTBOOTSTRAP;
    raft_configuration_close(&conf);
    if (rv == 0) {
      node->log(LogLevel::info, "bootstrapped a single-member group: id " + std::to_string(o.id) +
                                    " at " + o.address);
    } else if (rv != RAFT_CANTBOOTSTRAP) {  // CANTBOOTSTRAP: a restart, expected
      std::string msg = std::string("raft_bootstrap: ") + raft_strerror(rv);
      closing = true;
      raft_close(&raft, raft_close_cb);
      return Error(Errc::storage_failure, msg);
    }
    rv = raft_start(&raft);
    if (rv != 0) {
      std::string msg = std::string("raft_start: ") + raft_errmsg(&raft);
      closing = true;
      raft_close(&raft, raft_close_cb);
      return Error(Errc::storage_failure, msg);
    }
    uv_timer_start(&timer, timer_cb, 0, 20);
    refresh_status();
    return {};
  }
};

RaftNode::RaftNode(RaftNodeOptions options, RaftStateMachine& sm)
    : opts_(std::move(options)), sm_(sm) {}

RaftNode::~RaftNode() { stop(); }

void RaftNode::log(LogLevel level, const std::string& msg) const {
  if (opts_.log) opts_.log(level, msg);
}

Result<void> RaftNode::start() {
  if (started_.exchange(true)) return Error(Errc::internal, "raft node started twice");
  std::promise<Result<void>> ready;
  auto fut = ready.get_future();
  thread_ = std::thread([this, &ready] {
    pthread_setname_np(pthread_self(), "raft");
    thread_main(&ready);
  });
  Result<void> r = fut.get();
  if (!r.ok()) {
    thread_.join();  // the loop finished closing whatever was opened
    stopping_.store(true);
  }
  return r;
}

void RaftNode::thread_main(std::promise<Result<void>>* started) {
  impl_ = std::make_unique<Impl>();
  impl_->node = this;
  int rv = uv_loop_init(&impl_->loop);
  if (rv != 0) {
    started->set_value(Error(Errc::internal, std::string("uv_loop_init: ") + uv_strerror(rv)));
    return;
  }
  Result<void> opened = impl_->open();
  if (opened.ok()) {
    std::lock_guard lk(q_mu_);
    accepting_ = true;
  }
  bool ok = opened.ok();
  started->set_value(std::move(opened));  // `started` dangles after this
  uv_run(&impl_->loop, UV_RUN_DEFAULT);
  rv = uv_loop_close(&impl_->loop);
  if (rv != 0) log(LogLevel::warn, std::string("uv_loop_close: ") + uv_strerror(rv));
  if (ok) log(LogLevel::info, "raft node stopped");
}

bool RaftNode::submit(std::function<void(bool)> task) {
  std::lock_guard lk(q_mu_);
  if (!accepting_ || stopping_.load()) return false;
  queue_.push_back(std::move(task));
  uv_async_send(&impl_->async);
  return true;
}

void RaftNode::stop() {
  if (!started_.load()) return;
  {
    std::lock_guard lk(q_mu_);
    bool already = stopping_.exchange(true);
    if (!already && accepting_) uv_async_send(&impl_->async);
  }
  if (thread_.joinable()) thread_.join();
  role_.store(RaftRole::unavailable);
}

Result<ApplyResult> RaftNode::apply(std::string_view entry, std::chrono::milliseconds timeout,
                                    bool batchable) {
  auto* p = new Impl::Proposal();
  p->entry.assign(entry);
  p->batchable = batchable;
  auto fut = p->done.get_future();
  Impl* impl = impl_.get();
  if (!submit([impl, p](bool closing) { impl->do_apply(std::unique_ptr<Impl::Proposal>(p), closing); })) {
    delete p;
    return Error(Errc::unavailable, "raft node is not running");
  }
  if (fut.wait_for(timeout) != std::future_status::ready)
    return Error(Errc::timeout,
                 "no result within " + std::to_string(timeout.count()) + " ms; the change may "
                 "still commit", Outcome::uncertain);
  return fut.get();
}

Result<void> RaftNode::barrier(std::chrono::milliseconds timeout) {
  auto* op = new Impl::BarrierOp();
  auto fut = op->done.get_future();
  Impl* impl = impl_.get();
  if (!submit([impl, op](bool closing) { impl->do_barrier(op, closing); })) {
    delete op;
    return Error(Errc::unavailable, "raft node is not running");
  }
  if (fut.wait_for(timeout) != std::future_status::ready)
    return Error(Errc::timeout, "barrier not applied within " + std::to_string(timeout.count()) + " ms",
                 Outcome::uncertain);
  return fut.get();
}

}  // namespace sluice::raft_meta

namespace sluice::raft_meta {

template <class Op>
static Result<void> wait_op(std::future<Result<void>>& fut, std::chrono::milliseconds timeout,
                            const char* what) {
  if (fut.wait_for(timeout) != std::future_status::ready)
    return Error(Errc::timeout, std::string(what) + " not done within " +
                                    std::to_string(timeout.count()) + " ms; it may still complete",
                 Outcome::uncertain);
  return fut.get();
}

Result<void> RaftNode::add_voter(std::uint64_t id, const std::string& address,
                                 std::chrono::milliseconds timeout) {
  auto* op = new Impl::ChangeOp();
  op->impl = impl_.get();
  op->id = id;
  auto fut = op->done.get_future();
  Impl* impl = impl_.get();
  if (!submit([impl, op, address](bool closing) { impl->do_add_voter(op, address, closing); })) {
    delete op;
    return Error(Errc::unavailable, "raft node is not running");
  }
  return wait_op<Impl::ChangeOp>(fut, timeout, "adding a member");
}

Result<void> RaftNode::remove_server(std::uint64_t id, std::chrono::milliseconds timeout) {
  auto* op = new Impl::ChangeOp();
  op->impl = impl_.get();
  op->id = id;
  auto fut = op->done.get_future();
  Impl* impl = impl_.get();
  if (!submit([impl, op](bool closing) { impl->do_remove(op, closing); })) {
    delete op;
    return Error(Errc::unavailable, "raft node is not running");
  }
  return wait_op<Impl::ChangeOp>(fut, timeout, "removing a member");
}

Result<std::size_t> RaftNode::unclaimed_results(std::chrono::milliseconds timeout) {
  auto p = std::make_shared<std::promise<Result<std::size_t>>>();
  auto fut = p->get_future();
  Impl* impl = impl_.get();
  if (!submit([impl, p](bool closing) {
        if (closing) return p->set_value(Error(Errc::unavailable, "raft node is stopping"));
        p->set_value(impl->results.size());
      }))
    return Error(Errc::unavailable, "raft node is not running");
  if (fut.wait_for(timeout) != std::future_status::ready)
    return Error(Errc::timeout, "the raft thread did not answer", Outcome::transient);
  return fut.get();
}

Result<std::vector<RaftServer>> RaftNode::configuration(std::chrono::milliseconds timeout) {
  auto p = std::make_shared<std::promise<Result<std::vector<RaftServer>>>>();
  auto fut = p->get_future();
  Impl* impl = impl_.get();
  if (!submit([impl, p](bool closing) {
        if (closing) {
          p->set_value(Error(Errc::unavailable, "raft node is stopping"));
          return;
        }
        std::vector<RaftServer> out;
        for (unsigned i = 0; i < impl->raft.configuration.n; ++i) {
          const auto& srv = impl->raft.configuration.servers[i];
          out.push_back(RaftServer{srv.id, srv.address ? srv.address : "", srv.role,
                                   srv.role == RAFT_VOTER});
        }
        p->set_value(std::move(out));
      }))
    return Error(Errc::unavailable, "raft node is not running");
  if (fut.wait_for(timeout) != std::future_status::ready)
    return Error(Errc::timeout, "configuration not read in time");
  return fut.get();
}

}  // namespace sluice::raft_meta
