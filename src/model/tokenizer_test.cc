// Tokenizer tests. Expected ids come from independent sources:
//  * hand derivations from the vocab files (comments show the steps),
//  * testdata/tokenizers/derive_expected.py, a naive Python reference (Python `regex` module
//    instead of PCRE2, textbook quadratic BPE / run.c merge loop), sharing no code with ours,
//  * stories260K_greedy_golden.json (ids + text from an independent run.c re-implementation),
//  * the Hugging Face docs' SplitDelimiterBehavior example ("the-final--countdown").
#include "model/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/bpe_tokenizer.h"
#include "model/hf_pretokenizer.h"
#include "model/llama2c_tokenizer.h"
#include "model/tokenizer_util.h"
#include "model/wordlevel_tokenizer.h"

namespace strata {
namespace {

using Ids = std::vector<int32_t>;

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}
std::string deepseek_path() { return src_dir() + "/models/tokenizers/deepseek-v3/tokenizer.json.gz"; }
std::string tok512_path() { return src_dir() + "/testdata/tokenizers/tok512.bin"; }
std::string wordlevel_path() { return src_dir() + "/testdata/tokenizers/v41-tiny-tokenizer.json"; }

// Loaded once: the DeepSeek JSON is 7.8 MB.
const Tokenizer& deepseek() {
  static std::unique_ptr<Tokenizer> t = [] {
    auto r = load_tokenizer(deepseek_path());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  STRATA_CHECK(t != nullptr);
  return *t;
}
const Tokenizer& tok512() {
  static std::unique_ptr<Tokenizer> t = [] {
    auto r = load_tokenizer(tok512_path());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  STRATA_CHECK(t != nullptr);
  return *t;
}

// Streams `ids` through a StreamDecoder; checks every chunk is whole UTF-8.
std::string stream_decode(const Tokenizer& tok, const Ids& ids, int32_t prev = -1,
                          int* empty_pushes = nullptr) {
  StreamDecoder dec(tok, prev);
  std::string out;
  for (int32_t id : ids) {
    std::string chunk = dec.push(id);
    EXPECT_TRUE(tok::utf8_valid(chunk)) << "partial character emitted for id " << id;
    if (chunk.empty() && empty_pushes) ++*empty_pushes;
    out += chunk;
  }
  out += dec.finish();
  return out;
}

const std::vector<std::string>& round_trip_texts() {
  static const std::vector<std::string> texts = {
      "Hello, world! The quick brown fox jumps over the lazy dog.",
      "你好，世界！今天天气很好。我们去公园散步吧。",
      "def f(x):\n\tif x > 0:\n\t\treturn x  # positive\n    return -x\n\n\n  \t \n",
      "👨‍👩‍👧‍👦 family, 👍🏽 ok 🏳️‍🌈 flags 🇯🇵🇩🇪",
      "Ünïcödé Ελληνικά русский 日本語のテキスト 한국어 العربية हिन्दी 12345678 ½ Ⅻ",
      "  leading and trailing spaces  ",
      "\r\n\r\nwindows\r\nlines\r\n",
      "",
      "x",
  };
  return texts;
}

// ---------------------------------------------------------------- UTF-8 helpers

TEST(Utf8RepairTest, MaximalSubpartReplacement) {
  // Hand-derived per Unicode ch. 3 (U+FFFD substitution of maximal subparts).
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(tok::utf8_repair("a\xFF\xFE" "b"), "a" + r + r + "b");
  EXPECT_EQ(tok::utf8_repair("x\xE4\xB8y"), "x" + r + "y");        // truncated 3-byte seq: one
  EXPECT_EQ(tok::utf8_repair("\xED\xA0\x80"), r + r + r);           // surrogate: ED then A0, 80
  EXPECT_EQ(tok::utf8_repair("\xF0\x9F\x98"), r);                   // truncated at end: one
  EXPECT_EQ(tok::utf8_repair("\xC0\xAF"), r + r);                   // overlong lead C0
  EXPECT_EQ(tok::utf8_repair("ok \xE4\xBD\xA0"), "ok \xE4\xBD\xA0");  // valid untouched
  std::string out;
  EXPECT_EQ(tok::utf8_repair_append("ab\xF0\x9F\x98", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "ab");
  EXPECT_FALSE(tok::utf8_valid("\xE4\xB8"));
  EXPECT_TRUE(tok::utf8_valid("\xF0\x9F\x98\x80"));
}

TEST(Utf8RepairTest, ByteLevelTableIsGpt2) {
  // openai/gpt-2 bytes_to_unicode: '!' maps to itself, space is the 33rd remapped byte
  // (bytes 0..32 come first) -> U+0120 'Ġ', newline (byte 10) -> U+010A 'Ċ'.
  const auto& t = tok::byte_level_table();
  EXPECT_EQ(t.byte_to_utf8['!'], "!");
  EXPECT_EQ(t.byte_to_utf8[' '], "\xC4\xA0");   // Ġ
  EXPECT_EQ(t.byte_to_utf8['\n'], "\xC4\x8A");  // Ċ
  EXPECT_EQ(t.byte_to_utf8[0xAD], "\xC5\x83");  // soft hyphen, the last remapped byte: U+0143
  std::string b;
  EXPECT_TRUE(tok::byte_level_decode("\xC4\xA0the", &b));
  EXPECT_EQ(b, " the");
}

// ---------------------------------------------------------------- pre-tokenizer

StatusOr<tok::HfPreTokenizer> split_pretok(const std::string& behavior) {
  return tok::HfPreTokenizer::parse(nlohmann::json::parse(
      R"({"type":"Split","pattern":{"String":"-"},"invert":false,"behavior":")" + behavior + "\"}"));
}

TEST(HfPreTokenizerTest, SplitBehaviorsMatchHfDocs) {
  // Hugging Face tokenizers docs, SplitDelimiterBehavior, input "the-final--countdown".
  const std::string s = "the-final--countdown";
  using V = std::vector<std::string>;
  EXPECT_EQ(split_pretok("Removed")->split(s), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split_pretok("Isolated")->split(s), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_pretok("MergedWithPrevious")->split(s), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_pretok("MergedWithNext")->split(s), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_pretok("Contiguous")->split(s), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_FALSE(split_pretok("Sideways").ok());
}

TEST(HfPreTokenizerTest, WhitespaceAndUnsupported) {
  auto ws = tok::HfPreTokenizer::parse(nlohmann::json::parse(R"({"type":"Whitespace"})"));
  ASSERT_TRUE(ws.ok());
  // Whitespace = \w+|[^\w\s]+ (HF docs: "Hello there!" -> "Hello", "there", "!").
  EXPECT_EQ(ws->split("Hello there!  a,b"),
            (std::vector<std::string>{"Hello", "there", "!", "a", ",", "b"}));
  auto bad = tok::HfPreTokenizer::parse(nlohmann::json::parse(R"({"type":"Metaspace"})"));
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
}

// ---------------------------------------------------------------- DeepSeek BPE

TEST(DeepSeekTokenizerTest, MetadataAndSpecialIds) {
  const Tokenizer& t = deepseek();
  // tokenizer_config.json: bos "<｜begin▁of▁sentence｜>" (id 0), eos "<｜end▁of▁sentence｜>" (1).
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.vocab_size(), 128815);  // added tokens run to id 128814
  EXPECT_EQ(t.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(t.id_to_token(128804), "<｜Assistant｜>");
  EXPECT_EQ(t.id_to_token(999999), "");
  EXPECT_EQ(t.token_bytes(999999), "");
}

TEST(DeepSeekTokenizerTest, PreTokenizerFollowsRegex) {
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&deepseek());
  ASSERT_NE(bpe, nullptr);
  // Hand-derived from the pattern: stage 1 isolates \p{N}{1,3} -> "Hello world ", "123",
  // "456"; stage 2 (CJK) does nothing; stage 3 on "Hello world ": "[^\r\n\p{L}\p{P}\p{S}]?
  // [\p{L}\p{M}]+" gives "Hello", " world", then "\s+(?!\S)" takes the final " ".
  EXPECT_EQ(bpe->pre_tokenize("Hello world 123456"),
            (std::vector<std::string>{"Hello", " world", " ", "123", "456"}));
  // Digits group in threes from the left: 1234567 -> 123 456 7.
  EXPECT_EQ(bpe->pre_tokenize("1234567"), (std::vector<std::string>{"123", "456", "7"}));
  // A CJK run is isolated from the Latin text around it.
  EXPECT_EQ(bpe->pre_tokenize("ab你好cd"), (std::vector<std::string>{"ab", "你好", "cd"}));
  // Punctuation followed by ASCII letters stays together (first alternative).
  EXPECT_EQ(bpe->pre_tokenize("x.append(y)"),
            (std::vector<std::string>{"x", ".append", "(y", ")"}));
}

TEST(DeepSeekTokenizerTest, SingleWordsMatchVocabJson) {
  // Look the tokens up directly in the JSON file, independent of the tokenizer code.
  auto data = tok::read_file_maybe_gz(deepseek_path());
  ASSERT_TRUE(data.ok());
  const auto vocab = nlohmann::json::parse(*data).at("model").at("vocab");
  const Tokenizer& t = deepseek();
  EXPECT_EQ(t.encode("Hello"), Ids{vocab.at("Hello").get<int32_t>()});
  EXPECT_EQ(t.encode(" world"), Ids{vocab.at("Ġworld").get<int32_t>()});
  EXPECT_EQ(t.encode(" the"), Ids{vocab.at("Ġthe").get<int32_t>()});
  EXPECT_EQ(t.encode("\n"), Ids{vocab.at("Ċ").get<int32_t>()});
  EXPECT_EQ(t.encode("Hello"), Ids{19923});
  EXPECT_EQ(t.encode(" world"), Ids{2058});
}

TEST(DeepSeekTokenizerTest, MatchesIndependentReference) {
  // From testdata/tokenizers/derive_expected.py (naive Python reference).
  const Tokenizer& t = deepseek();
  EXPECT_EQ(t.encode("Hello world 123456"), (Ids{19923, 2058, 223, 6895, 18009}));
  EXPECT_EQ(t.encode("The quick brown fox jumps over the lazy dog."),
            (Ids{671, 4787, 13769, 46012, 54994, 1060, 270, 41638, 6397, 16}));
  EXPECT_EQ(t.encode("你好，世界！今天天气很好。"),
            (Ids{30594, 303, 3427, 1175, 5237, 16652, 12210, 320}));
  EXPECT_EQ(t.encode("def f(x):\n\tif x > 0:\n\t\treturn x  # positive\n    return -x\n"),
            (Ids{3465, 285, 4042, 3395, 5733, 1527, 1955, 223, 18, 1137, 200,
                 5562, 1527, 223, 1823, 4337, 201, 361, 1354, 565, 90, 201}));
  EXPECT_EQ(t.encode("👨‍👩‍👧‍👦 family, 👍🏽 ok"),
            (Ids{25730, 104, 46088, 25730, 105, 46088, 25730, 103, 46088, 25730, 102, 3096, 14,
                 102527, 40965, 124, 9109}));
  EXPECT_EQ(t.encode("Ünïcödé Ελληνικά русский 日本語のテキスト 한국어"),
            (Ids{52526, 80, 16709, 69, 54879, 619, 19217, 43595, 20975, 39641, 16980, 223, 88768,
                 1576, 17383, 20367, 24552, 51345, 9227}));
  EXPECT_EQ(t.encode("<｜begin▁of▁sentence｜>Hi<｜User｜>"), (Ids{0, 23166, 128803}));
}

// A 14 KB mixed-script stress text (CJK, Hangul, RTL, Indic, ZWJ emoji, combining marks,
// U+2028 / U+3000 / NBSP, code) and tok512 lines, ids from derive_expected.py --write-golden.
TEST(DeepSeekTokenizerTest, MatchesReferenceOnStressText) {
  std::ifstream in(src_dir() + "/testdata/tokenizers/tokenizer_expected.json");
  ASSERT_TRUE(in);
  const auto g = nlohmann::json::parse(in);
  const std::string text = g.at("deepseek_v3").at("text").get<std::string>();
  const Ids want = g.at("deepseek_v3").at("ids").get<Ids>();
  const Ids got = deepseek().encode(text);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "at token " << i;
  EXPECT_EQ(deepseek().decode(got), text);
  for (const auto& c : g.at("tok512")) {
    EXPECT_EQ(tok512().encode(c.at("text").get<std::string>()), c.at("ids").get<Ids>())
        << c.at("text").get<std::string>();
  }
}

TEST(DeepSeekTokenizerTest, SpecialTokensAreSingleIds) {
  const Tokenizer& t = deepseek();
  EXPECT_EQ(t.encode("<｜begin▁of▁sentence｜>"), Ids{0});
  EXPECT_EQ(t.encode("<｜end▁of▁sentence｜>"), Ids{1});
  EXPECT_EQ(t.encode("<｜Assistant｜>"), Ids{128804});
  EXPECT_EQ(t.decode({0}), "<｜begin▁of▁sentence｜>");
  // parse_special=false: the literal text is ordinary text (several byte-level tokens).
  const Ids plain = t.encode("<｜begin▁of▁sentence｜>", /*parse_special=*/false);
  EXPECT_GT(plain.size(), 1u);
  for (int32_t id : plain) EXPECT_NE(id, 0);
  EXPECT_EQ(t.decode(plain), "<｜begin▁of▁sentence｜>");
}

TEST(DeepSeekTokenizerTest, RoundTrip) {
  const Tokenizer& t = deepseek();
  for (const std::string& s : round_trip_texts()) {
    const Ids ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    EXPECT_EQ(stream_decode(t, ids), s);
  }
}

TEST(DeepSeekTokenizerTest, InvalidUtf8BecomesReplacementChars) {
  // Documented behavior: ill-formed input bytes are replaced by U+FFFD (maximal subpart
  // rule) before tokenizing, so decode gives the repaired text.
  const Tokenizer& t = deepseek();
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(t.decode(t.encode("ab\xFF\xFE" "cd")), "ab" + r + r + "cd");
  EXPECT_EQ(t.decode(t.encode("x\xE4\xB8y")), "x" + r + "y");
  EXPECT_EQ(t.decode(t.encode("\xE4\xB8")), r);
}

TEST(DeepSeekTokenizerTest, StreamDecoderNeverEmitsPartialChars) {
  const Tokenizer& t = deepseek();
  const std::string s = "你好世界🎉👨‍👩‍👧 ok 🇯🇵";
  const Ids ids = t.encode(s);
  int empty = 0;
  EXPECT_EQ(stream_decode(t, ids, -1, &empty), s);
  EXPECT_GT(empty, 0);  // some emoji span several byte-level tokens
  // Bytes that can never complete come out as U+FFFD; a dangling prefix at finish() too.
  StreamDecoder dec(t);
  const int32_t lead = *t.token_to_id("\xC3\xA6");  // byte-level char for byte 0xE6
  EXPECT_EQ(dec.push(lead), "");
  EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");
}

TEST(DeepSeekTokenizerTest, ConcurrentEncodeIsConsistent) {
  const Tokenizer& t = deepseek();
  const std::string s = round_trip_texts()[3] + round_trip_texts()[2];
  const Ids want = t.encode(s);
  std::vector<Ids> got(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i) th.emplace_back([&, i] { for (int k = 0; k < 50; ++k) got[i] = t.encode(s); });
  for (auto& x : th) x.join();
  for (const Ids& g : got) EXPECT_EQ(g, want);
}

// Encode throughput on tinyshakespeare (printed, never asserted). Also a 1 MB round trip.
TEST(DeepSeekTokenizerTest, TinyShakespeareThroughput) {
  const char* env = std::getenv("STRATA_TINYSHAKESPEARE");
  const std::string path = env ? env : std::string(STRATA_SOURCE_DIR) + "/../shared/data/prompts/long_text/tinyshakespeare.txt";
  std::ifstream in(path, std::ios::binary);
  if (!in) GTEST_SKIP() << "no " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  for (const Tokenizer* t : {&deepseek(), &tok512()}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = t->encode(text);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[throughput] %s: %zu bytes -> %zu tokens in %.3f s = %.2f MB/s, %.0f tokens/s\n",
                t == &deepseek() ? "deepseek-v3 BPE" : "llama2.c tok512", text.size(), ids.size(),
                sec, text.size() / sec / 1e6, ids.size() / sec);
    if (t == &deepseek()) {
      EXPECT_EQ(t->decode(ids), text);
    } else {
      EXPECT_EQ(stream_decode(*t, ids, Llama2cTokenizer::kBos), text);
    }
  }
}

// ---------------------------------------------------------------- llama2.c tok512

TEST(Llama2cTokenizerTest, HandDerivedEncoding) {
  const Tokenizer& t = tok512();
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  // " Once upon a time": start [' ',O,n,c,e,' ',u,p,o,n,' ',a,' ',t,i,m,e]; merges by score
  // (from tok512.bin): ' t'(0) ' a'(-2) 'im'(-29) 'on'(-30) ' u'(-59) ' O'(-60) ' On'(-62)
  // 'ce'(-72) ' up'(-91) 'ime'(-110) ' time'(-119) ' Once'(-144) ' upon'(-148)
  // -> ' Once'=403 ' upon'=407 ' a'=261 ' time'=378 (also the first ids of the golden sample).
  EXPECT_EQ(t.encode("Once upon a time"), (Ids{403, 407, 261, 378}));
  // '你' = E4 BD A0 is not a piece: byte fallback ids 0xE4+3, 0xBD+3, 0xA0+3 after ' '(410).
  EXPECT_EQ(t.encode("你"), (Ids{410, 231, 192, 163}));
  // '\n' has no piece: <0x0A> = 13.
  EXPECT_EQ(t.encode("\n"), (Ids{410, 13}));
  EXPECT_EQ(t.encode(""), Ids{});
  // Tie on equal scores goes to the leftmost pair: "appp" -> [' ',a,p,p,p]; ' a'(-2) first;
  // then 'pp'(-80) at two overlapping places (no ' ap' or 'ppp' piece): left one wins ->
  // ' a'=261 'pp'=339 'p'=427 (rightmost-first would give 261 427 339).
  EXPECT_EQ(t.encode("appp"), (Ids{261, 339, 427}));
  // From derive_expected.py (run.c's quadratic loop in Python).
  EXPECT_EQ(t.encode("Lily's mom said, \"Hi!\"\n"),
            (Ids{317, 439, 419, 357, 336, 432, 313, 440, 417, 443, 436, 13}));
  EXPECT_EQ(t.encode("café"), (Ids{280, 412, 431, 485}));
}

TEST(Llama2cTokenizerTest, DecodesGoldenSample) {
  std::ifstream in(src_dir() + "/testdata/tokenizers/stories260K_greedy_golden.json");
  ASSERT_TRUE(in);
  const auto g = nlohmann::json::parse(in);
  Ids ids = {Llama2cTokenizer::kBos};
  for (const auto& v : g.at("generated_ids")) {
    if (v.get<int32_t>() == Llama2cTokenizer::kBos) break;
    ids.push_back(v.get<int32_t>());
  }
  const std::string want = g.at("generated_text").get<std::string>();
  const Tokenizer& t = tok512();
  // decode() keeps BOS's own piece ("\n<s>\n"); the text after it is the golden sample.
  EXPECT_EQ(t.decode(ids), t.id_to_token(1) + want);
  EXPECT_EQ(stream_decode(t, Ids(ids.begin() + 1, ids.end()), Llama2cTokenizer::kBos), want);
}

TEST(Llama2cTokenizerTest, RoundTripAndInvalidUtf8) {
  const Tokenizer& t = tok512();
  for (const std::string& s : round_trip_texts()) {
    const Ids ids = t.encode(s);
    // The dummy-prefix space is stripped only after BOS (run.c decode).
    EXPECT_EQ(stream_decode(t, ids, Llama2cTokenizer::kBos), s);
    EXPECT_EQ(t.decode(ids), s.empty() ? "" : " " + s);
  }
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(stream_decode(t, t.encode("ab\xFF\xFE" "cd"), Llama2cTokenizer::kBos), "ab" + r + r + "cd");
  EXPECT_EQ(stream_decode(t, t.encode("x\xE4\xB8y"), Llama2cTokenizer::kBos), "x" + r + "y");
  // Chinese/emoji are all byte-fallback tokens here: chunks must still be whole characters.
  int empty = 0;
  EXPECT_EQ(stream_decode(t, t.encode("你好🎉"), Llama2cTokenizer::kBos, &empty), "你好🎉");
  // The dummy-prefix " " after BOS decodes to nothing; then 3, 3 and 4 byte tokens, of which
  // all but the last byte of each character must wait.
  EXPECT_EQ(empty, 1 + 2 + 2 + 3);
}

TEST(Llama2cTokenizerTest, RejectsCorruptFile) {
  const std::string p = ::testing::TempDir() + "/bad_tok.bin";
  {
    std::ofstream out(p, std::ios::binary);
    const int32_t hdr[3] = {7, 0, 1000};  // max len 7, score 0.0, length 1000 past EOF
    out.write(reinterpret_cast<const char*>(hdr), sizeof(hdr));
  }
  auto r = load_tokenizer(p);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(load_tokenizer("/nonexistent/tokenizer.bin").status().code(), StatusCode::kNotFound);
}

// ---------------------------------------------------------------- WordLevel

TEST(WordLevelTokenizerTest, V41TinyVocabulary) {
  auto r = load_tokenizer(wordlevel_path());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Tokenizer& t = **r;
  ASSERT_NE(dynamic_cast<const WordLevelTokenizer*>(&t), nullptr);
  EXPECT_EQ(t.vocab_size(), 2048);
  EXPECT_EQ(t.bos_id(), 0);  // "<｜begin▁of▁sentence｜>" is vocab id 0 in the file
  EXPECT_EQ(t.eos_id(), 1);
  // Every vocabulary entry encodes to its own id (no pre-tokenizer: whole text is one word).
  std::ifstream in(wordlevel_path());
  const auto vocab = nlohmann::json::parse(in).at("model").at("vocab");
  ASSERT_EQ(vocab.size(), 2048u);
  for (const auto& [tok, id] : vocab.items()) {
    ASSERT_EQ(t.encode(tok), Ids{id.get<int32_t>()}) << tok;
    ASSERT_EQ(t.decode({id.get<int32_t>()}), tok);
  }
  EXPECT_EQ(t.encode(" TOK0"), Ids{5});
  EXPECT_EQ(t.encode("\ttok5é"), Ids{20});
  EXPECT_EQ(t.encode("not a token"), Ids{2});  // unk_token "<｜▁pad▁｜>" = 2
  EXPECT_EQ(t.decode({3, 4}), "tok0 Tok0");    // HF default: join with spaces
}

TEST(WordLevelTokenizerTest, WhitespacePreTokenizerAndDir) {
  const std::string dir = ::testing::TempDir() + "/wl_tok";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/tokenizer.json");
    out << R"({"added_tokens":[{"id":4,"content":"[SEP]","special":true}],
               "normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"decoder":null,
               "model":{"type":"WordLevel","unk_token":"[UNK]",
                        "vocab":{"[UNK]":0,"hello":1,"world":2,"!":3,"[SEP]":4}}})";
  }
  {
    std::ofstream cfg(dir + "/tokenizer_config.json");
    cfg << R"({"bos_token": "hello", "eos_token": {"content": "[SEP]"}})";
  }
  auto r = load_tokenizer_from_dir(dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->encode("hello  world\t!\nfoo[SEP]world"), (Ids{1, 2, 3, 0, 4, 2}));
  EXPECT_EQ((*r)->bos_id(), 1);  // from tokenizer_config.json (string form)
  EXPECT_EQ((*r)->eos_id(), 4);  // from tokenizer_config.json (AddedToken object form)
  EXPECT_EQ((*r)->encode("foo[SEP]", /*parse_special=*/false), Ids{0});  // one unknown word
  EXPECT_EQ(load_tokenizer_from_dir(dir + "/missing").status().code(), StatusCode::kNotFound);
  auto from_models = load_tokenizer_from_dir(src_dir() + "/models/deepseek-v41-tiny");
  if (from_models.ok()) {
    EXPECT_EQ((*from_models)->vocab_size(), 2048);
  }
}

}  // namespace
}  // namespace strata
