// MPI world; see mpi_world.h.
#include "mpi/mpi_world.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "base/check.h"

namespace strata {
namespace {

bool g_init = false;

void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

class MpiExpertComm final : public ExpertComm {
 public:
  int rank() const override { return mpi_rank(); }
  int size() const override { return mpi_size(); }
  double seconds() const override { return seconds_; }

  void allgather_rows(float* buf, const std::vector<int64_t>& rows_per_rank,
                      int64_t row_floats) override {
    const auto t0 = std::chrono::steady_clock::now();
    const int n = size(), me = rank();
    STRATA_CHECK(static_cast<int>(rows_per_rank.size()) == n);
    // Counts first: every rank says how many rows it sends; they must be what every rank
    // derived from the replicated routing.
    const int64_t mine = rows_per_rank[me];
    std::vector<int64_t> said(n);
    MPI_Allgather(&mine, 1, MPI_INT64_T, said.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    std::vector<int> counts(n), displs(n);
    int64_t at = 0;
    for (int r = 0; r < n; ++r) {
      STRATA_CHECK_MSG(said[r] == rows_per_rank[r],
                       "expert parallel: rank {} sends {} rows, rank {} expected {} (the ranks' "
                       "routing diverged)", r, said[r], me, rows_per_rank[r]);
      STRATA_CHECK_MSG(rows_per_rank[r] <= INT_MAX && at <= INT_MAX,
                       "expert parallel: {} rows exceed MPI's int counts", at + rows_per_rank[r]);
      counts[r] = static_cast<int>(rows_per_rank[r]);
      displs[r] = static_cast<int>(at);
      at += rows_per_rank[r];
    }
    STRATA_CHECK_MSG(row_floats <= INT_MAX, "expert parallel: rows of {} floats", row_floats);
    MPI_Datatype row;
    MPI_Type_contiguous(static_cast<int>(row_floats), MPI_FLOAT, &row);
    MPI_Type_commit(&row);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), row,
                   MPI_COMM_WORLD);
    MPI_Type_free(&row);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
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

}  // namespace strata
