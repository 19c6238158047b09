#include "serve/chat_template.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace strata
