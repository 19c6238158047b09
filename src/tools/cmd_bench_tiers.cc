// `strata bench tiers [--object-bytes B] [--count N] [--kv-cache-dir DIR] [--kv-pool URL]`:
// store and load throughput and latency of each tier below the working pool (tiers/tiers.h)
// for prefix-cache unit objects of B bytes (default 2,987,660 + header: one V4.1-Flash unit
// with its boundary snapshot, docs/state.md section 5), plus the object encode / verify cost
// (XXH3 checksum). The disk tier is loaded twice: from the page cache, then after the files'
// pages were dropped (fdatasync + POSIX_FADV_DONTNEED), which reads the device. These are the
// constants the store-vs-recompute choice weighs (docs/tiers.md). Attaches to `bench`.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "state/unit_store.h"
#include "tiers/tiers.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct BenchTiersArgs {
  int64_t object_bytes = 2987660;
  int count = 64;
  std::string dir;   // default: a fresh directory under the system temp dir
  std::string pool;  // redis://HOST:PORT (optional)
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void report(const char* what, int n, int64_t bytes, double s) {
  fmt::print("  {:<34} {:>8.1f} MB/s  {:>8.3f} ms/object\n", what, n * double(bytes) / s / 1e6,
             s / n * 1e3);
}

void drop_pages(const std::string& dir) {
  for (const auto& de : std::filesystem::directory_iterator(dir)) {
    const int fd = ::open(de.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int run_bench_tiers(const BenchTiersArgs& a) {
  if (a.object_bytes <= 0 || a.count <= 0) {
    fmt::print(stderr, "bench tiers: --object-bytes and --count must be > 0\n");
    return 2;
  }
  UnitObject o;
  o.identity = 1;
  o.tokens.assign(64, 7);
  o.sections.emplace_back(static_cast<size_t>(a.object_bytes));
  std::mt19937_64 rng(1);
  for (auto& b : o.sections[0]) b = static_cast<uint8_t>(rng());
  std::vector<std::vector<uint8_t>> objs;
  double t0 = now_s();
  for (int i = 0; i < a.count; ++i) {
    o.key = 1000 + i;
    objs.push_back(encode_unit_object(o));
  }
  const int64_t bytes = static_cast<int64_t>(objs[0].size());
  fmt::print("bench tiers: {} objects of {} bytes\n", a.count, bytes);
  report("encode (copy + XXH3)", a.count, bytes, now_s() - t0);
  t0 = now_s();
  for (int i = 0; i < a.count; ++i)
    if (!decode_unit_object(objs[i], 1, 1000 + i, {a.object_bytes}, {}).ok()) return 1;
  report("decode + verify (XXH3 + copy)", a.count, bytes, now_s() - t0);

  const std::string dir = a.dir.empty()
      ? (std::filesystem::temp_directory_path() / fmt::format("strata-bench-tiers-{}", ::getpid())).string()
      : a.dir;
  struct Tier {
    std::string name;
    std::unique_ptr<UnitStore> store;
  };
  std::vector<Tier> tiers;
  tiers.push_back({"host", make_host_tier(int64_t{1} << 40)});
  auto disk = make_disk_tier(dir, int64_t{1} << 40);
  if (!disk.ok()) {
    fmt::print(stderr, "bench tiers: {}\n", disk.status().message());
    return 1;
  }
  tiers.push_back({"disk", std::move(*disk)});
  if (!a.pool.empty()) {
    auto r = make_redis_tier(a.pool);
    if (!r.ok()) {
      fmt::print(stderr, "bench tiers: {}\n", r.status().message());
      return 1;
    }
    tiers.push_back({"redis", std::move(*r)});
  }
  for (Tier& t : tiers) {
    t0 = now_s();
    for (int i = 0; i < a.count; ++i) t.store->put(1000 + i, objs[i]);
    report((t.name + " store").c_str(), a.count, bytes, now_s() - t0);
    t0 = now_s();
    for (int i = 0; i < a.count; ++i)
      if (!t.store->get(1000 + i)) {
        fmt::print(stderr, "bench tiers: {} lost object {}\n", t.name, i);
        return 1;
      }
    report((t.name + " load").c_str(), a.count, bytes, now_s() - t0);
    if (t.name == "disk") {
      drop_pages(dir);
      t0 = now_s();
      for (int i = 0; i < a.count; ++i) (void)t.store->get(1000 + i);
      report("disk load (page cache dropped)", a.count, bytes, now_s() - t0);
    }
    for (int i = 0; i < a.count; ++i) t.store->reject(1000 + i);  // clean up (files, keys)
  }
  if (a.dir.empty()) std::filesystem::remove_all(dir);
  return 0;
}

void setup_bench_tiers(CLI::App& app) {
  CLI::App* parent = app.get_subcommand("bench");
  auto args = std::make_shared<BenchTiersArgs>();
  auto* cmd = parent->add_subcommand("tiers", "Store / load cost of the prefix-cache tiers");
  cmd->add_option("--object-bytes", args->object_bytes,
                  "Payload bytes per object (default: one V4.1-Flash unit with its snapshot)")
      ->capture_default_str();
  cmd->add_option("--count", args->count, "Objects per tier")->capture_default_str();
  cmd->add_option("--kv-cache-dir", args->dir, "Disk tier directory (default: a temporary one)");
  cmd->add_option("--kv-pool", args->pool, "Also measure this Redis pool (redis://HOST:PORT)");
  cmd->callback([args] { set_exit_code(run_bench_tiers(*args)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("bench_tiers", setup_bench_tiers);
}  // namespace strata::tools
