// Mirrored runner; see mirrored_runner.h.
#include "mpi/mirrored_runner.h"

#include <mpi.h>

#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "base/byte_msg.h"
#include "base/check.h"
#include "mpi/dist_wait.h"
#include "mpi/mpi_world.h"

namespace strata {
namespace {

enum Op : uint8_t { kAdd = 1, kRelease, kAttach, kStep, kTruncate, kDraft, kStop };

using Msg = ByteMsg;

// Broadcasts rank 0's message. `idle`: a follower waiting for rank 0's next call (which may
// come hours later) waits for its length without the watchdog; everything else is bounded by
// --dist-timeout-s (DistFailure).
void bcast(Msg* m, bool idle = false) {
  int64_t n = static_cast<int64_t>(m->b.size());
  MPI_Request req;
  MPI_Ibcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, &req);
  if (idle) {
    idle_wait(&req);
  } else {
    dist_wait(&req, "mirrored call");
  }
  m->b.resize(static_cast<size_t>(n));
  // Large steps: in chunks below MPI's int count.
  for (int64_t off = 0; off < n; off += int64_t{1} << 30) {
    const int c = static_cast<int>(std::min<int64_t>(n - off, int64_t{1} << 30));
    MPI_Ibcast(m->b.data() + off, c, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    dist_wait(&req, "mirrored call");
  }
  m->at = 0;
}

class MirroredRunner final : public ModelRunner {
 public:
  explicit MirroredRunner(std::unique_ptr<ModelRunner> inner) : r_(std::move(inner)) {
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has loaded its replica (follow() meets it here)
  }
  ~MirroredRunner() override {
    if (!broken_.ok()) return;  // the job is being aborted (fail())
    Msg m;
    m.put<uint8_t>(kStop);
    try {
      bcast(&m);
    } catch (const DistFailure& e) {
      fail(e);
    }
  }

  const ModelInfo& info() const override { return r_->info(); }
  Status add_sequence(SeqId seq) override {
    Msg m;
    m.put<uint8_t>(kAdd);
    m.put<int64_t>(seq.value);
    return guarded([&] {
      bcast(&m);
      return r_->add_sequence(seq);
    });
  }
  void release_sequence(SeqId seq) override {
    Msg m;
    m.put<uint8_t>(kRelease);
    m.put<int64_t>(seq.value);
    const Status st = guarded([&] {
      bcast(&m);
      return ok_status();
    });
    // After a failure rank 0's runner may hold a step that never finished: leave it alone
    // (the job is being aborted).
    if (st.ok()) r_->release_sequence(seq);
  }
  int64_t sequence_length(SeqId seq) const override { return r_->sequence_length(seq); }
  int64_t token_capacity_left(SeqId seq) const override { return r_->token_capacity_left(seq); }
  bool token_capacity_is_shared() const override { return r_->token_capacity_is_shared(); }
  Status step(std::span<const StepItem> items, std::vector<float>* logits) override {
    Msg m;
    m.put<uint8_t>(kStep);
    m.put<int64_t>(static_cast<int64_t>(items.size()));
    for (const StepItem& it : items) {
      m.put<int64_t>(it.seq.value);
      m.put_ids(it.tokens);
      m.put<uint8_t>(it.want_logits);
      m.put<int64_t>(it.prompt_len);
      m.put<uint8_t>(it.all_logits);
    }
    return guarded([&] {
      bcast(&m);
      return r_->step(items, logits);
    });
  }
  std::vector<CacheUsage> cache_usage() const override { return r_->cache_usage(); }
  Status truncate_sequence(SeqId seq, int64_t new_len) override {
    Msg m;
    m.put<uint8_t>(kTruncate);
    m.put<int64_t>(seq.value);
    m.put<int64_t>(new_len);
    return guarded([&] {
      bcast(&m);
      return r_->truncate_sequence(seq, new_len);
    });
  }
  int draft_block_size() const override { return r_->draft_block_size(); }
  std::string drafter_method() const override { return r_->drafter_method(); }
  StatusOr<std::vector<int32_t>> draft_tokens(SeqId seq, int32_t next, int max_k,
                                              std::vector<float>* confidence) override {
    Msg m;
    m.put<uint8_t>(kDraft);
    m.put<int64_t>(seq.value);
    m.put<int32_t>(next);
    m.put<int32_t>(max_k);
    StatusOr<std::vector<int32_t>> out = std::vector<int32_t>{};
    const Status st = guarded([&] {
      bcast(&m);
      out = r_->draft_tokens(seq, next, max_k, confidence);
      return ok_status();
    });
    if (!st.ok()) return st;
    return out;
  }
  int64_t attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) override {
    Msg m;
    m.put<uint8_t>(kAttach);
    m.put<int64_t>(seq.value);
    m.put_ids(tokens);
    int64_t hit = 0;
    (void)guarded([&] {
      bcast(&m);
      hit = r_->attach_cached_prefix(seq, tokens);
      return ok_status();
    });
    return hit;
  }
  int64_t peek_cached_prefix(std::span<const int32_t> tokens) const override {
    return r_->peek_cached_prefix(tokens);
  }
  void prefetch_cached_prefix(std::span<const int32_t> tokens) override {
    r_->prefetch_cached_prefix(tokens);  // local I/O: rank 0's tiers only
  }
  int64_t prefix_alignment() const override { return r_->prefix_alignment(); }
  int64_t prefix_cache_bytes_per_unit() const override { return r_->prefix_cache_bytes_per_unit(); }
  const StateGraph* state_graph() const override { return r_->state_graph(); }
  Status export_handoff(SeqId seq, int64_t from_pos, std::span<const int32_t> ids,
                        HandoffState* out) const override {
    return r_->export_handoff(seq, from_pos, ids, out);
  }
  Status import_handoff(SeqId, std::span<const int32_t>, const HandoffState&, int64_t*) override {
    return Status(StatusCode::kUnimplemented,
                  "importing a handed-off state with several ranks is not supported yet");
  }
  const EngramTableStore* engram_tables() const override { return r_->engram_tables(); }
  int64_t decode_bytes_read(int64_t len) const override { return r_->decode_bytes_read(len); }

 private:
  // Runs a mirrored call; once a collective failed (a rank hung or died: DistFailure) every
  // call returns the error without touching MPI, and the job is aborted shortly after.
  template <class F>
  Status guarded(F&& f) {
    if (!broken_.ok()) return broken_;
    try {
      return f();
    } catch (const DistFailure& e) {
      fail(e);
      return broken_;
    }
  }
  void fail(const DistFailure& e) {
    broken_ = Status(StatusCode::kUnavailable,
                     fmt::format("multi-rank engine failed ({}); the job is being aborted",
                                 e.what()));
    fmt::print(stderr, "strata: {}\n", broken_.message());
    std::fflush(stderr);
    mpi_abort_after(2.0, 1);  // the failed requests' errors go out first
  }

  std::unique_ptr<ModelRunner> r_;
  Status broken_;
};

}  // namespace

void follow_calls(ModelRunner& r);

std::unique_ptr<ModelRunner> make_mirrored_runner(std::unique_ptr<ModelRunner> inner) {
  return std::make_unique<MirroredRunner>(std::move(inner));
}

void follow(ModelRunner& r) {
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's MirroredRunner: every replica is loaded
  try {
    follow_calls(r);
  } catch (const DistFailure& e) {
    fmt::print(stderr, "strata (rank {}): {}; aborting the job\n", mpi_rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void follow_calls(ModelRunner& r) {
  std::vector<float> logits;
  for (;;) {
    Msg m;
    bcast(&m, /*idle=*/true);
    const uint8_t op = m.get<uint8_t>();
    switch (op) {
      case kAdd:
        (void)r.add_sequence(SeqId{m.get<int64_t>()});
        break;
      case kRelease:
        r.release_sequence(SeqId{m.get<int64_t>()});
        break;
      case kAttach: {
        const SeqId seq{m.get<int64_t>()};
        const std::vector<int32_t> ids = m.get_ids();
        (void)r.attach_cached_prefix(seq, ids);
        break;
      }
      case kStep: {
        const int64_t n = m.get<int64_t>();
        std::vector<std::vector<int32_t>> toks(static_cast<size_t>(n));
        std::vector<StepItem> items(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          items[i].seq = SeqId{m.get<int64_t>()};
          toks[i] = m.get_ids();
          items[i].tokens = toks[i];
          items[i].want_logits = m.get<uint8_t>() != 0;
          items[i].prompt_len = m.get<int64_t>();
          items[i].all_logits = m.get<uint8_t>() != 0;
        }
        (void)r.step(items, &logits);
        break;
      }
      case kTruncate: {
        const SeqId seq{m.get<int64_t>()};
        (void)r.truncate_sequence(seq, m.get<int64_t>());
        break;
      }
      case kDraft: {
        const SeqId seq{m.get<int64_t>()};
        const int32_t next = m.get<int32_t>();
        (void)r.draft_tokens(seq, next, m.get<int32_t>());
        break;
      }
      case kStop:
        return;
      default:
        STRATA_CHECK_MSG(false, "mirrored runner: unknown op {}", op);
    }
  }
}

}  // namespace strata
