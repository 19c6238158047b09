#include "exec/runner_factory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace strata {
namespace {
namespace fs = std::filesystem;

TEST(RunnerFactoryTest, DispatchErrors) {
  const fs::path dir = fs::temp_directory_path() / "strata_factory_test";
  fs::create_directories(dir);
  auto missing = make_model_runner((dir / "nope").string(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  {
    std::ofstream(dir / "config.json") << R"({"architectures": ["MambaForCausalLM"]})";
  }
  auto arch = model_architecture(dir.string());
  ASSERT_TRUE(arch.ok());
  EXPECT_EQ(*arch, "MambaForCausalLM");
  auto unknown = make_model_runner(dir.string(), {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(unknown.status().message().find("MambaForCausalLM"), std::string::npos);
  {
    std::ofstream(dir / "config.json") << "{broken";
  }
  EXPECT_EQ(make_model_runner(dir.string(), {}).status().code(), StatusCode::kInvalidArgument);
  // A Llama config without weights: the loader's NotFound names the directory.
  {
    std::ofstream(dir / "config.json")
        << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
              "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
              "max_position_embeddings": 16})";
  }
  auto noweights = make_model_runner(dir.string(), {});
  ASSERT_FALSE(noweights.ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
