#include "serve/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "model/tokenizer.h"

namespace strata {
namespace {

TEST(ChatTemplateTest, DeepSeekFormat) {
  std::vector<ChatMessage> m = {{"system", "S"}, {"user", "hello"}, {"assistant", "hi"},
                                {"user", "1+1=?"}};
  auto s = render_chat(ChatFormat::kDeepSeek, m);
  ASSERT_TRUE(s.ok());
  // Expected text written out by hand from DeepSeek's published format.
  EXPECT_EQ(*s,
            "<｜begin▁of▁sentence｜>S<｜User｜>hello<｜Assistant｜></think>hi"
            "<｜end▁of▁sentence｜><｜User｜>1+1=?<｜Assistant｜></think>");
  auto t = render_chat(ChatFormat::kDeepSeek, {{"user", "q"}}, {.thinking = true});
  EXPECT_EQ(*t, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>");
}

TEST(ChatTemplateTest, PlainFormatAndErrors) {
  auto s = render_chat(ChatFormat::kPlain, {{"system", "S"}, {"user", "U"}});
  EXPECT_EQ(*s, "system: S\nuser: U\nassistant:");
  EXPECT_FALSE(render_chat(ChatFormat::kPlain, {}).ok());
  EXPECT_FALSE(render_chat(ChatFormat::kDeepSeek, {{"wizard", "x"}}).ok());
  EXPECT_EQ(chat_format_for_architecture("deepseek_v41"), ChatFormat::kDeepSeek);
  EXPECT_EQ(chat_format_for_architecture("DeepseekV41ForCausalLM"), ChatFormat::kDeepSeek);
  EXPECT_EQ(chat_format_for_architecture("llama"), ChatFormat::kPlain);
}

TEST(ChatTemplateTest, DeepSeekMarkersAreSingleSpecialTokens) {
  // The DeepSeek-V3 tokenizer in models/tokenizers: BOS = 0, <｜User｜> = 128803,
  // <｜Assistant｜> = 128804 (its tokenizer.json added_tokens).
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  auto tok = load_tokenizer_from_dir(std::string(src ? src : STRATA_SOURCE_DIR) +
                                     "/models/tokenizers/deepseek-v3");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto text = render_chat(ChatFormat::kDeepSeek, {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}});
  ASSERT_TRUE(text.ok());
  std::vector<int32_t> ids = (*tok)->encode(*text, /*parse_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128803), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128804), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);  // <｜end▁of▁sentence｜> after "Yo"
}

}  // namespace
}  // namespace strata
