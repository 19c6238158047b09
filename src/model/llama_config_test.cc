#include "model/llama_config.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

const char* kGood = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
  "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
  "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-05,
  "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": [2, 3]})";

TEST(LlamaConfigTest, ParsesHfFields) {
  auto c = parse_llama_config_json(kGood);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->intermediate_size, 172);
  EXPECT_EQ(c->num_hidden_layers, 5);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->kv_dim(), 32);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->rope_interleaved);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  // 512*64 + 5*(64*64 + 2*64*32 + 64*64 + 3*64*172 + 128) + 64, by hand.
  EXPECT_EQ(c->num_parameters(), 32768 + 5 * (4096 + 4096 + 4096 + 33024 + 128) + 64);
}

TEST(LlamaConfigTest, RoundTripsThroughToJson) {
  auto c = parse_llama_config_json(kGood);
  ASSERT_TRUE(c.ok());
  auto c2 = parse_llama_config_json(c->to_json());
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  EXPECT_EQ(c2->num_key_value_heads, 4);
  EXPECT_EQ(c2->head_dim, 8);
  EXPECT_EQ(c2->eos_token_id, 2);
}

TEST(LlamaConfigTest, ClearErrors) {
  auto missing = parse_llama_config_json(R"({"hidden_size": 64})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("intermediate_size"), std::string::npos);
  auto bad_type = parse_llama_config_json(R"({"hidden_size": "64"})");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("hidden_size"), std::string::npos);
  std::string gqa = kGood;
  gqa.replace(gqa.find("\"num_key_value_heads\": 4"), 24, "\"num_key_value_heads\": 3");
  auto g = parse_llama_config_json(gqa);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("num_key_value_heads"), std::string::npos);
  EXPECT_FALSE(parse_llama_config_json("{not json").ok());
  auto file = load_llama_config("/nonexistent/dir");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata
