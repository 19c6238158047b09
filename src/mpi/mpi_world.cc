// MPI world; see mpi_world.h.
#include "mpi/mpi_world.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"
#include "mpi/dist_wait.h"

namespace strata {
namespace {

bool g_init = false;
std::atomic<double> g_timeout{0.0};

void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

// An MPI datatype of one row of `row_bytes` bytes (counts are then rows, far from MPI's int
// limit), freed at scope exit.
struct RowType {
  MPI_Datatype t;
  RowType(const char* what, int64_t row_bytes) {
    STRATA_CHECK_MSG(row_bytes > 0 && row_bytes <= INT_MAX, "{}: rows of {} bytes", what,
                     row_bytes);
    MPI_Type_contiguous(static_cast<int>(row_bytes), MPI_BYTE, &t);
    MPI_Type_commit(&t);
  }
  ~RowType() { MPI_Type_free(&t); }
};

// Row counts as MPI's ints with their displacements; a count beyond INT_MAX is a CHECK
// failure naming the layout.
void int_counts(const char* what, const std::vector<int64_t>& rows, std::vector<int>* counts,
                std::vector<int>* displs) {
  const size_t n = rows.size();
  counts->resize(n);
  displs->resize(n);
  int64_t at = 0;
  for (size_t r = 0; r < n; ++r) {
    STRATA_CHECK_MSG(rows[r] >= 0 && rows[r] <= INT_MAX && at <= INT_MAX,
                     "{}: {} rows exceed MPI's int counts", what, at + rows[r]);
    (*counts)[r] = static_cast<int>(rows[r]);
    (*displs)[r] = static_cast<int>(at);
    at += rows[r];
  }
}

// In-place MPI_Allgatherv of rows over MPI_COMM_WORLD, counts first (the contract of
// ExpertComm::allgatherv_rows and DcpComm::allgather_rows); `what` names the layout in errors.
void allgather_rows(const char* what, void* buf, const std::vector<int64_t>& rows_per_rank,
                    int64_t row_bytes) {
  const int n = mpi_size(), me = mpi_rank();
  STRATA_CHECK(static_cast<int>(rows_per_rank.size()) == n);
  // Counts first: every rank says how many rows it sends; they must be what every rank
  // derived from the replicated state.
  const int64_t mine = rows_per_rank[me];
  std::vector<int64_t> said(n);
  MPI_Request req;
  MPI_Iallgather(&mine, 1, MPI_INT64_T, said.data(), 1, MPI_INT64_T, MPI_COMM_WORLD, &req);
  dist_wait(&req, what);
  for (int r = 0; r < n; ++r)
    STRATA_CHECK_MSG(said[r] == rows_per_rank[r],
                     "{}: rank {} sends {} rows, rank {} expected {} (the ranks' replicated "
                     "state diverged)", what, r, said[r], me, rows_per_rank[r]);
  std::vector<int> counts, displs;
  int_counts(what, rows_per_rank, &counts, &displs);
  RowType row(what, row_bytes);
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), row.t,
                  MPI_COMM_WORLD, &req);
  dist_wait(&req, what);
}

// MPI_Alltoallv of rows over MPI_COMM_WORLD, counts first (ExpertComm::alltoallv_rows).
void alltoallv_rows(const char* what, const void* send, const std::vector<int64_t>& send_rows,
                    void* recv, const std::vector<int64_t>& recv_rows, int64_t row_bytes) {
  const int n = mpi_size(), me = mpi_rank();
  STRATA_CHECK(static_cast<int>(send_rows.size()) == n &&
               static_cast<int>(recv_rows.size()) == n);
  std::vector<int64_t> said(n);
  MPI_Request req;
  MPI_Ialltoall(send_rows.data(), 1, MPI_INT64_T, said.data(), 1, MPI_INT64_T, MPI_COMM_WORLD,
                &req);
  dist_wait(&req, what);
  for (int s = 0; s < n; ++s)
    STRATA_CHECK_MSG(said[s] == recv_rows[s],
                     "{}: rank {} sends {} rows to rank {}, which expected {} (the ranks' "
                     "replicated routing diverged)", what, s, said[s], me, recv_rows[s]);
  std::vector<int> sc, sd, rc, rd;
  int_counts(what, send_rows, &sc, &sd);
  int_counts(what, recv_rows, &rc, &rd);
  RowType row(what, row_bytes);
  MPI_Ialltoallv(send, sc.data(), sd.data(), row.t, recv, rc.data(), rd.data(), row.t,
                 MPI_COMM_WORLD, &req);
  dist_wait(&req, what);
}

// Seconds summed over scopes (a layout's collective time).
class Stopwatch {
 public:
  template <class F>
  void time(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double seconds() const { return seconds_; }

 private:
  double seconds_ = 0;
};

class MpiExpertComm final : public ExpertComm {
 public:
  int rank() const override { return mpi_rank(); }
  int size() const override { return mpi_size(); }
  double seconds() const override { return watch_.seconds(); }
  void alltoallv_rows(const void* send, const std::vector<int64_t>& send_rows, void* recv,
                      const std::vector<int64_t>& recv_rows, int64_t row_bytes) override {
    watch_.time(
        [&] { strata::alltoallv_rows(kWhat, send, send_rows, recv, recv_rows, row_bytes); });
  }
  void allgatherv_rows(void* buf, const std::vector<int64_t>& rows_per_rank,
                       int64_t row_bytes) override {
    watch_.time([&] { allgather_rows(kWhat, buf, rows_per_rank, row_bytes); });
  }

 private:
  static constexpr const char* kWhat = "expert parallel";
  Stopwatch watch_;
};

class MpiDcpComm final : public DcpComm {
 public:
  explicit MpiDcpComm(int64_t interleave) : interleave_(interleave) {}
  int rank() const override { return mpi_rank(); }
  int size() const override { return mpi_size(); }
  int64_t interleave() const override { return interleave_; }
  double seconds() const override { return watch_.seconds(); }
  void allgather_rows(float* buf, const std::vector<int64_t>& rows_per_rank,
                      int64_t row_floats) override {
    watch_.time([&] {
      strata::allgather_rows("decode context parallel", buf, rows_per_rank,
                     row_floats * static_cast<int64_t>(sizeof(float)));
    });
  }

 private:
  int64_t interleave_;
  Stopwatch watch_;
};

// Pipeline stages over MPI_COMM_WORLD: stage = rank. A boundary is its length (int64) then
// its bytes in chunks below MPI's int counts, point to point (send_next / recv_prev) or
// broadcast from the last rank; every wait is bounded by the watchdog (dist_wait).
class MpiPipeComm final : public PipeComm {
 public:
  int rank() const override { return mpi_rank(); }
  int size() const override { return mpi_size(); }
  double seconds() const override { return seconds_; }
  void send_next(const std::vector<uint8_t>& bytes) override {
    Timed t(this);
    int64_t n = static_cast<int64_t>(bytes.size());
    MPI_Request req;
    MPI_Isend(&n, 1, MPI_INT64_T, rank() + 1, kTag, MPI_COMM_WORLD, &req);
    dist_wait(&req, "pipeline stage boundary (send)");
    for (int64_t off = 0; off < n; off += kChunk) {
      MPI_Isend(bytes.data() + off, chunk(n, off), MPI_BYTE, rank() + 1, kTag, MPI_COMM_WORLD, &req);
      dist_wait(&req, "pipeline stage boundary (send)");
    }
  }
  std::vector<uint8_t> recv_prev() override {
    Timed t(this);
    int64_t n = 0;
    MPI_Request req;
    MPI_Irecv(&n, 1, MPI_INT64_T, rank() - 1, kTag, MPI_COMM_WORLD, &req);
    dist_wait(&req, "pipeline stage boundary (receive)");
    STRATA_CHECK_MSG(n >= 0, "pipeline stage boundary of {} bytes", n);
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    for (int64_t off = 0; off < n; off += kChunk) {
      MPI_Irecv(bytes.data() + off, chunk(n, off), MPI_BYTE, rank() - 1, kTag, MPI_COMM_WORLD, &req);
      dist_wait(&req, "pipeline stage boundary (receive)");
    }
    return bytes;
  }
  void bcast_from_last(std::vector<uint8_t>* bytes) override {
    Timed t(this);
    const int root = size() - 1;
    int64_t n = static_cast<int64_t>(bytes->size());
    MPI_Request req;
    MPI_Ibcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD, &req);
    dist_wait(&req, "pipeline result (broadcast)");
    bytes->resize(static_cast<size_t>(n));
    for (int64_t off = 0; off < n; off += kChunk) {
      MPI_Ibcast(bytes->data() + off, chunk(n, off), MPI_BYTE, root, MPI_COMM_WORLD, &req);
      dist_wait(&req, "pipeline result (broadcast)");
    }
  }

 private:
  static constexpr int kTag = 0x5050;
  static constexpr int64_t kChunk = int64_t{1} << 30;
  static int chunk(int64_t n, int64_t off) { return static_cast<int>(std::min(n - off, kChunk)); }
  struct Timed {
    MpiPipeComm* c;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Timed() {
      c->seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  double seconds_ = 0;
};

}  // namespace

bool mpi_init_if_launched(int* argc, char*** argv) {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE") && !std::getenv("PMIX_RANK"))
    return false;
  int provided = 0;
  // SERIALIZED: the server's engine thread (not main) runs the forwards and their collectives.
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  STRATA_CHECK_MSG(rc == MPI_SUCCESS, "MPI_Init_thread failed ({})", rc);
  STRATA_CHECK_MSG(provided >= MPI_THREAD_SERIALIZED,
                   "this MPI provides thread level {} < MPI_THREAD_SERIALIZED", provided);
  g_init = true;
  std::atexit(finalize_at_exit);
  if (mpi_rank() != 0) {  // every rank runs the same command; rank 0 reports
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 1);
      ::close(devnull);
    }
  }
  return true;
}

int mpi_rank() {
  if (!g_init) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_size() {
  if (!g_init) return 1;
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

std::shared_ptr<ExpertComm> make_mpi_expert_comm() { return std::make_shared<MpiExpertComm>(); }

void set_dist_timeout(double seconds) { g_timeout = seconds; }
double dist_timeout() { return g_timeout; }

void dist_wait(MPI_Request* req, const char* what) {
  const double limit = g_timeout;
  if (limit <= 0) {
    MPI_Wait(req, MPI_STATUS_IGNORE);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int64_t polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    // Spin first (collectives inside a step take microseconds to milliseconds), then yield
    // the CPU between polls.
    if (polls > 10000) std::this_thread::sleep_for(std::chrono::microseconds(200));
    if ((polls & 63) == 0 && std::chrono::duration<double>(Clock::now() - t0).count() > limit)
      throw DistFailure(fmt::format(
          "{}: rank {} waited {:.0f} s (--dist-timeout-s) for the other ranks: a rank hung or "
          "died", what, mpi_rank(), limit));
  }
}

void idle_wait(MPI_Request* req) {
  for (int64_t polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (polls > 10000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void mpi_abort_after(double seconds, int code) {
  std::thread([seconds, code] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    MPI_Abort(MPI_COMM_WORLD, code);
  }).detach();
}

std::shared_ptr<PipeComm> make_mpi_pipe_comm() { return std::make_shared<MpiPipeComm>(); }

std::shared_ptr<DcpComm> make_mpi_dcp_comm(int64_t interleave) {
  STRATA_CHECK(interleave >= 1);
  return std::make_shared<MpiDcpComm>(interleave);
}

}  // namespace strata
