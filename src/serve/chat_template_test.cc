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
  ChatTemplateOptions thinking;
  thinking.thinking = true;
  auto t = render_chat(ChatFormat::kDeepSeek, {{"user", "q"}}, thinking);
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

// Tools reach the DeepSeek prompt (the V4 encoder's "## Tools" section); the plain format
// has no tool syntax and refuses them.
TEST(ChatTemplate, ToolsInTheDeepseekPrompt) {
  ChatTemplateOptions o;
  o.tools_json = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  auto s = render_chat(ChatFormat::kDeepSeek, {{"user", "weather?"}}, o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_NE(s->find("## Tools"), std::string::npos) << *s;
  EXPECT_NE(s->find("\"get_weather\""), std::string::npos) << *s;
  auto without = render_chat(ChatFormat::kDeepSeek, {{"user", "weather?"}});
  EXPECT_EQ(without->find("## Tools"), std::string::npos);
  EXPECT_FALSE(render_chat(ChatFormat::kPlain, {{"user", "x"}}, o).ok());
}

}  // namespace
}  // namespace strata
