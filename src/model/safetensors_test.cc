// Safetensors loader: error handling on hand-built malformed files, sharded checkpoints,
// typed get(), and write -> open round trips.
#include "model/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// Writes a raw safetensors file: 8-byte LE header length (or `len_override`), header, data.
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
               int64_t len_override = -1) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = len_override >= 0 ? static_cast<uint64_t>(len_override) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("strata_st_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Opens `p` expecting failure with `code`; returns the message.
  std::string expect_error(const std::string& p, StatusCode code) {
    auto r = SafetensorsFile::open(p);
    EXPECT_FALSE(r.ok()) << p;
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), p)) << r.status().message();
    return r.status().message();
  }

  fs::path dir_;
};

const char* kValidHeader =
    R"({"__metadata__":{"format":"pt"},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";

std::vector<uint8_t> valid_data() {
  std::vector<uint8_t> d(22);
  const float f[4] = {1.0f, -2.0f, 3.5f, 0.25f};
  std::memcpy(d.data(), f, 16);
  const uint16_t b[3] = {0x3F80, 0xC000, 0x4040};  // 1, -2, 3
  std::memcpy(d.data() + 16, b, 6);
  return d;
}

TEST_F(SafetensorsTest, OpensValidFile) {
  write_raw(path("ok.safetensors"), kValidHeader, valid_data());
  auto f = SafetensorsFile::open(path("ok.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const auto& t = (*f)->tensors();
  ASSERT_EQ(t.size(), 2u);
  const TensorView& a = t.at("a");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.numel(), 4);
  EXPECT_EQ(a.num_bytes, 16u);
  EXPECT_EQ(a.f32()[1], -2.0f);
  EXPECT_EQ(a.f32()[2], 3.5f);
  EXPECT_EQ(a.file, path("ok.safetensors"));
  const TensorView& b = t.at("b");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(bf16_to_f32(b.u16()[2]), 3.0f);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, MissingFile) {
  expect_error(path("nope.safetensors"), StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, TooShortForHeaderLength) {
  std::ofstream(path("short.safetensors"), std::ios::binary) << "abc";
  expect_error(path("short.safetensors"), StatusCode::kDataLoss);
  std::ofstream(path("empty.safetensors"), std::ios::binary);
  expect_error(path("empty.safetensors"), StatusCode::kDataLoss);
}

TEST_F(SafetensorsTest, HeaderLengthPastEnd) {
  write_raw(path("h.safetensors"), kValidHeader, valid_data(), 1000);
  std::string msg = expect_error(path("h.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "header length")) << msg;
  write_raw(path("huge.safetensors"), kValidHeader, valid_data(), INT64_MAX);
  expect_error(path("huge.safetensors"), StatusCode::kDataLoss);
}

TEST_F(SafetensorsTest, MalformedJson) {
  write_raw(path("j.safetensors"), R"({"a":{"dtype":"F32","shape":[1],)", {0, 0, 0, 0});
  expect_error(path("j.safetensors"), StatusCode::kDataLoss);
  write_raw(path("arr.safetensors"), "[1,2,3]", {});
  expect_error(path("arr.safetensors"), StatusCode::kDataLoss);
  write_raw(path("types.safetensors"), R"({"a":{"dtype":7,"shape":"x","data_offsets":[0,4]}})",
            {0, 0, 0, 0});
  std::string msg = expect_error(path("types.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'a'")) << msg;
  write_raw(path("neg.safetensors"), R"({"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})",
            {0, 0, 0, 0});
  msg = expect_error(path("neg.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'a'")) << msg;
  write_raw(path("off.safetensors"), R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}})",
            {0, 0, 0, 0});
  msg = expect_error(path("off.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'a'")) << msg;
}

TEST_F(SafetensorsTest, UnknownDtype) {
  write_raw(path("d.safetensors"), R"({"weird":{"dtype":"F7","shape":[4],"data_offsets":[0,4]}})",
            {0, 0, 0, 0});
  std::string msg = expect_error(path("d.safetensors"), StatusCode::kUnimplemented);
  EXPECT_TRUE(contains(msg, "'weird'")) << msg;
  EXPECT_TRUE(contains(msg, "F7")) << msg;
}

TEST_F(SafetensorsTest, BeginAfterEnd) {
  write_raw(path("be.safetensors"), R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})",
            {0, 0, 0, 0});
  std::string msg = expect_error(path("be.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'x'")) << msg;
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  write_raw(path("o.safetensors"),
            R"({"first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("second":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::vector<uint8_t>(12, 0));
  std::string msg = expect_error(path("o.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'first'") && contains(msg, "'second'")) << msg;
  EXPECT_TRUE(contains(msg, "overlap")) << msg;
}

TEST_F(SafetensorsTest, OffsetsPastEnd) {
  // Header says 16 bytes, the file holds 10 (a truncated download).
  write_raw(path("t.safetensors"), R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            std::vector<uint8_t>(10, 0));
  std::string msg = expect_error(path("t.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'w'")) << msg;
  EXPECT_TRUE(contains(msg, "past the end")) << msg;
}

TEST_F(SafetensorsTest, SizeMismatch) {
  write_raw(path("s.safetensors"), R"({"m":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,10]}})",
            std::vector<uint8_t>(10, 0));
  std::string msg = expect_error(path("s.safetensors"), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(msg, "'m'")) << msg;
  EXPECT_TRUE(contains(msg, "12")) << msg;  // what [3,2] BF16 needs
}

TEST_F(SafetensorsTest, PackedFp4StoredWithLogicalShapeIsAccepted) {
  // I8 [4, 8] holding 32 FP4 values in 16 bytes; F32 with half the bytes is still an error.
  write_raw(path("p.safetensors"),
            R"({"e":{"dtype":"I8","shape":[4,8],"data_offsets":[0,16]}})",
            std::vector<uint8_t>(16, 0x11));
  auto f = SafetensorsFile::open(path("p.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors().at("e").num_bytes, 16u);
  write_raw(path("q.safetensors"),
            R"({"e":{"dtype":"F8_E4M3","shape":[4,8],"data_offsets":[0,16]}})",
            std::vector<uint8_t>(16, 0x11));
  expect_error(path("q.safetensors"), StatusCode::kDataLoss);
}

TEST_F(SafetensorsTest, EveryTruncationFailsCleanly) {
  write_raw(path("ok.safetensors"), kValidHeader, valid_data());
  const std::vector<uint8_t> full = read_all(path("ok.safetensors"));
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string p = path("cut.safetensors");
    {
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(full.data()), static_cast<std::streamsize>(n));
    }
    auto f = SafetensorsFile::open(p);
    EXPECT_FALSE(f.ok()) << "truncated to " << n;
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << n << ": " << f.status().to_string();
    }
  }
}

TEST_F(SafetensorsTest, RandomHeaderCorruptionNeverCrashes) {
  write_raw(path("ok.safetensors"), kValidHeader, valid_data());
  const std::vector<uint8_t> full = read_all(path("ok.safetensors"));
  std::mt19937 rng(1234);
  int failures = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<uint8_t> b = full;
    const size_t pos = 8 + rng() % std::strlen(kValidHeader);
    b[pos] = static_cast<uint8_t>(rng());
    const std::string p = path("fuzz.safetensors");
    {
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    auto f = SafetensorsFile::open(p);
    if (!f.ok()) {
      ++failures;
      EXPECT_TRUE(contains(f.status().message(), p)) << f.status().message();
    } else {
      // Whatever parsed must lie inside the data section.
      for (const auto& [name, t] : (*f)->tensors()) EXPECT_LE(t.num_bytes, valid_data().size());
    }
  }
  EXPECT_GT(failures, 0);
}

TEST_F(SafetensorsTest, ProgressLineForLargeFile) {
  // A sparse 65 MiB tensor: large enough for the progress line, cheap to create.
  const int64_t n = (65ll << 20);
  const std::string header = R"({"big":{"dtype":"U8","shape":[)" + std::to_string(n) +
                             R"(],"data_offsets":[0,)" + std::to_string(n) + "]}}";
  const std::string p = path("big.safetensors");
  write_raw(p, header, {});
  fs::resize_file(p, 8 + header.size() + static_cast<uint64_t>(n));
  ::testing::internal::CaptureStderr();
  auto f = SafetensorsFile::open(p, /*progress=*/true);
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(contains(err, "100%")) << err;
  // Captured stderr is not a terminal: one final line, no in-place updates.
  EXPECT_FALSE(contains(err, "\r")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // No progress line without the flag.
  ::testing::internal::CaptureStderr();
  auto g = SafetensorsFile::open(p, /*progress=*/false);
  err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(err, "");
}

// ------------------------------------------------------------------ checkpoints

TEST_F(SafetensorsTest, CheckpointSingleFileGetAndMismatch) {
  write_raw(path("model.safetensors"), kValidHeader, valid_data());
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->has("a"));
  EXPECT_FALSE((*c)->has("zzz"));
  EXPECT_EQ((*c)->names(), (std::vector<std::string>{"a", "b"}));
  auto a = (*c)->get("a", DType::kF32, {2, 2});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->f32()[0], 1.0f);

  auto missing = (*c)->get("layers.0.missing.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), "layers.0.missing.weight"));
  EXPECT_TRUE(contains(missing.status().message(), dir_.string()));

  auto bad_shape = (*c)->get("a", DType::kF32, {4});
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_EQ(bad_shape.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = bad_shape.status().message();
  EXPECT_TRUE(contains(m, "'a'")) << m;
  EXPECT_TRUE(contains(m, "[4]")) << m;
  EXPECT_TRUE(contains(m, "[2, 2]")) << m;
  EXPECT_TRUE(contains(m, path("model.safetensors"))) << m;

  auto bad_dtype = (*c)->get("b", DType::kF16, {3});
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_EQ(bad_dtype.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(bad_dtype.status().message(), "BF16"));
  EXPECT_TRUE(contains(bad_dtype.status().message(), "F16"));

  // A direct file path works too.
  auto direct = SafetensorsCheckpoint::open(path("model.safetensors"));
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_TRUE((*direct)->has("b"));
}

TEST_F(SafetensorsTest, CheckpointMissingEverything) {
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(c.status().message(), dir_.string()));
  auto d = SafetensorsCheckpoint::open(path("no_such_dir"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, CheckpointPropagatesFileErrors) {
  write_raw(path("model.safetensors"), kValidHeader, valid_data(), 5000);
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(c.status().message(), path("model.safetensors")));
}

void write_index(const std::string& path, const std::string& weight_map) {
  std::ofstream(path) << R"({"metadata":{"total_size":30},"weight_map":)" << weight_map << "}";
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  write_raw(path("model-00001-of-00002.safetensors"), kValidHeader, valid_data());
  write_raw(path("model-00002-of-00002.safetensors"),
            R"({"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
            {7, 0, 0, 0, 0, 0, 0, 0});
  write_index(path("model.safetensors.index.json"),
              R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
              R"("c":"model-00002-of-00002.safetensors"})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->names(), (std::vector<std::string>{"a", "b", "c"}));
  auto t = (*c)->get("c", DType::kI64, {1});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->data[0], 7);
  EXPECT_EQ(t->file, path("model-00002-of-00002.safetensors"));
}

TEST_F(SafetensorsTest, ShardedCheckpointMissingShard) {
  write_raw(path("model-00001-of-00002.safetensors"), kValidHeader, valid_data());
  write_index(path("model.safetensors.index.json"),
              R"({"a":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(c.status().message(), "model-00002-of-00002.safetensors"))
      << c.status().message();
}

TEST_F(SafetensorsTest, ShardedCheckpointTensorNotInShard) {
  write_raw(path("model-00001-of-00001.safetensors"), kValidHeader, valid_data());
  write_index(path("model.safetensors.index.json"),
              R"({"a":"model-00001-of-00001.safetensors","ghost":"model-00001-of-00001.safetensors"})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(c.status().message(), "'ghost'")) << c.status().message();
  EXPECT_TRUE(contains(c.status().message(), "model-00001-of-00001.safetensors"));
}

TEST_F(SafetensorsTest, ShardedCheckpointBadIndex) {
  std::ofstream(path("model.safetensors.index.json")) << "{not json";
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(c.status().message(), "model.safetensors.index.json"));
}

// ------------------------------------------------------------------ writing

TEST_F(SafetensorsTest, RoundTripAllStorageTypes) {
  const float f32[6] = {1.0f, -0.5f, 3.25f, 1e-30f, -7.0f, 65504.0f};
  std::vector<uint8_t> f32b(sizeof(f32));
  std::memcpy(f32b.data(), f32, sizeof(f32));
  const uint16_t bf[4] = {0x3F80, 0xBF00, 0x4049, 0x0001};
  std::vector<uint8_t> bfb(sizeof(bf));
  std::memcpy(bfb.data(), bf, sizeof(bf));
  const std::vector<uint8_t> f8 = {0x38, 0x7E, 0x80, 0x01, 0xB8, 0x40, 0x3C, 0x08};
  const std::vector<uint8_t> e8 = {127, 120};
  const std::vector<uint8_t> i8 = {0x21, 0xF7, 0x00, 0x9A, 0x11, 0x22};
  const std::vector<uint8_t> empty;
  std::vector<TensorToWrite> ts = {
      {"w.f32", DType::kF32, {2, 3}, f32b},
      {"w.bf16", DType::kBF16, {4}, bfb},
      {"w.weight", DType::kF8_E4M3, {2, 4}, f8},
      {"w.scale", DType::kF8_E8M0, {1, 2}, e8},
      {"experts.0.w1.weight", DType::kI8, {2, 3}, i8},
      {"empty", DType::kF32, {0, 4}, empty},
  };
  const std::string p = path("rt.safetensors");
  Status st = write_safetensors(p, ts, {{"format", "pt"}, {"producer", "strata test"}});
  ASSERT_TRUE(st.ok()) << st.to_string();

  // Header length is a multiple of 8 and padding is spaces (HF layout).
  const std::vector<uint8_t> raw = read_all(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(raw[i]) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  size_t last = 8 + n - 1;
  while (raw[last] == ' ') --last;
  EXPECT_EQ(raw[last], '}');
  EXPECT_EQ(raw.size(), 8 + n + f32b.size() + bfb.size() + f8.size() + e8.size() + i8.size());

  auto f = SafetensorsFile::open(p);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->metadata().at("producer"), "strata test");
  ASSERT_EQ((*f)->tensors().size(), ts.size());
  for (const TensorToWrite& w : ts) {
    const TensorView& t = (*f)->tensors().at(w.name);
    EXPECT_EQ(t.dtype, w.dtype) << w.name;
    EXPECT_EQ(t.shape, w.shape) << w.name;
    ASSERT_EQ(t.num_bytes, w.bytes.size()) << w.name;
    if (t.num_bytes) {
      EXPECT_EQ(std::memcmp(t.data, w.bytes.data(), t.num_bytes), 0) << w.name;
    }
  }
  EXPECT_EQ((*f)->tensors().at("w.f32").f32()[5], 65504.0f);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(SafetensorsTest, WriteRejectsBadInput) {
  const std::vector<uint8_t> three = {1, 2, 3};
  Status st = write_safetensors(path("x.safetensors"), {{"t", DType::kF32, {1}, three}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "'t'")) << st.message();
  st = write_safetensors(path("x.safetensors"),
                         {{"t", DType::kU8, {3}, three}, {"t", DType::kU8, {3}, three}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
  st = write_safetensors(path("no_dir/x.safetensors"), {{"t", DType::kU8, {3}, three}});
  EXPECT_FALSE(st.ok());
}

// safetensors aligns nothing: an F32 tensor after a 3-byte U8 tensor starts at an odd offset.
// open() serves it from an aligned copy with the same bytes (typed f32() reads are then
// defined); the aligned U8 tensor stays in the mapping.
TEST_F(SafetensorsTest, MisalignedTensorsAreServedAligned) {
  const std::vector<uint8_t> u8 = {7, 8, 9};
  const float vals[2] = {1.5f, -2.25f};
  std::vector<uint8_t> f32(8);
  std::memcpy(f32.data(), vals, 8);
  const std::string p = path("misaligned.safetensors");
  ASSERT_TRUE(write_safetensors(p, {{"a", DType::kU8, {3}, u8}, {"b", DType::kF32, {2}, f32}}).ok());
  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorView& a = (*r)->tensors().at("a");
  const TensorView& b = (*r)->tensors().at("b");
  EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + 3), u8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % alignof(float), 0u);
  EXPECT_EQ(b.num_bytes, 8u);
  EXPECT_EQ(b.f32()[0], 1.5f);
  EXPECT_EQ(b.f32()[1], -2.25f);
  // The copy is not a mapping: releasing its pages must leave it alone (MADV_DONTNEED on
  // heap memory would zero it); the mapped view's pages fault back in with the same bytes.
  EXPECT_TRUE(a.mapped);
  EXPECT_FALSE(b.mapped);
  release_view_pages(a);
  release_view_pages(b);
  EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + 3), u8);
  EXPECT_EQ(b.f32()[1], -2.25f);
}

// A view released after use (a loader that packed it) still reads the file's bytes, also
// when the tensor spans several pages; and the NaN/Inf scan through the file descriptor finds
// the same count as a scan of the mapping.
TEST_F(SafetensorsTest, ReleasedViewsReadTheSameBytes) {
  std::vector<float> v(3 * 4096 + 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  v[7] = std::numeric_limits<float>::infinity();
  v[9000] = std::numeric_limits<float>::quiet_NaN();
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
  const std::string p = path("big.safetensors");
  ASSERT_TRUE(write_safetensors(p, {{"w", DType::kF32, {static_cast<int64_t>(v.size())}, bytes}}).ok());
  auto r = SafetensorsFile::open(p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorView& w = (*r)->tensors().at("w");
  ASSERT_TRUE(w.mapped);
  EXPECT_EQ((*r)->scan_nonfinite(w), 2);
  EXPECT_EQ(count_nonfinite(w.dtype, w.data, w.num_bytes), 2);
  release_view_pages(w);
  EXPECT_EQ(0, std::memcmp(w.data, v.data(), v.size() * 4));
}


TEST(TensorLayer, ParsesDeepseekAndHuggingFaceLayerNames) {
  EXPECT_EQ(tensor_layer("layers.0.attn.wq_a.weight"), 0);
  EXPECT_EQ(tensor_layer("layers.42.ffn.experts.3.w1.weight"), 42);
  EXPECT_EQ(tensor_layer("model.layers.7.self_attn.q_proj.weight"), 7);
  EXPECT_EQ(tensor_layer("embed.weight"), -1);
  EXPECT_EQ(tensor_layer("mtp.0.norm.weight"), -1);
  EXPECT_EQ(tensor_layer("layers.x.weight"), -1);
  EXPECT_EQ(tensor_layer("layers.3"), -1);
  EXPECT_EQ(tensor_layer("model.norm.weight"), -1);
}

// A pipeline stage skips the NaN/Inf scan of other stages' layers only: a NaN in layer 3 is
// not seen by a stage running layers [0, 2) and is refused by one running [2, 4); a NaN in a
// tensor outside any layer is refused by every stage.
TEST_F(SafetensorsTest, StageSkipsOnlyOtherLayersNanScans) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> bad = {1.0f, nan}, good = {1.0f, 2.0f};
  auto bytes = [](const std::vector<float>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
  };
  const std::string p = path("model.safetensors");
  ASSERT_TRUE(write_safetensors(p, {{"layers.3.w", DType::kF32, {2}, bytes(bad)},
                                    {"layers.1.w", DType::kF32, {2}, bytes(good)},
                                    {"head.weight", DType::kF32, {2}, bytes(bad)}},
                                {})
                  .ok());
  for (auto [begin, end, layer3_ok] : {std::tuple{0, 2, true}, {2, 4, false}, {0, 1 << 30, false}}) {
    auto ck = SafetensorsCheckpoint::open(p);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    (*ck)->skip_scans_outside_layers(begin, end);
    auto l3 = (*ck)->get("layers.3.w", DType::kF32, {2});
    EXPECT_EQ(l3.ok(), layer3_ok) << begin << ".." << end;
    if (!l3.ok()) {
      EXPECT_EQ(l3.status().code(), StatusCode::kDataLoss);
    }
    EXPECT_TRUE((*ck)->get("layers.1.w", DType::kF32, {2}).ok());
    auto head = (*ck)->get("head.weight", DType::kF32, {2});
    EXPECT_FALSE(head.ok()) << begin << ".." << end;
  }
}

}  // namespace
}  // namespace strata
