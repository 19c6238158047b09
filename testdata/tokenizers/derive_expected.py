#!/usr/bin/env python3
"""Independent reference for the expected token ids in src/model/tokenizer_test.cc.

A deliberately naive re-implementation, written from the Hugging Face `tokenizers` docs and
the llama2.c run.c description, sharing no code with src/model/*tokenizer*.cc:
  * DeepSeek-V3 tokenizer.json (byte-level BPE): pre-tokenizer Split regexes applied with
    Python's third-party `regex` module (not PCRE2), GPT-2 bytes_to_unicode, then the textbook
    quadratic BPE loop (merge the lowest-rank adjacent pair, leftmost first, until none).
  * llama2.c tok512.bin: run.c's quadratic best-score merge loop.
Usage: python3 derive_expected.py            (prints the ids quoted in the tests)
       python3 derive_expected.py --write-golden  (writes tokenizer_expected.json)
Needs python3-regex.
"""
import gzip, json, os, struct, sys
import regex

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(ROOT))


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class RefBpe:
    def __init__(self, path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            j = json.load(f)
        self.vocab = j["model"]["vocab"]
        self.ranks = {}
        for i, m in enumerate(j["model"]["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = i
        self.added = {t["content"]: t["id"] for t in j["added_tokens"]}
        self.splits = [regex.compile(p["pattern"]["Regex"]) for p in j["pre_tokenizer"]["pretokenizers"]
                       if p["type"] == "Split"]
        self.b2u = bytes_to_unicode()

    def pretokenize(self, text):
        pieces = [text]
        for rx in self.splits:  # every Split is behavior Isolated, invert false
            out = []
            for p in pieces:
                pos = 0
                for m in rx.finditer(p):
                    if m.start() > pos:
                        out.append(p[pos:m.start()])
                    out.append(m.group())
                    pos = m.end()
                if pos < len(p):
                    out.append(p[pos:])
            pieces = [p for p in out if p]
        return pieces

    def bpe(self, piece):
        syms = [self.b2u[b] for b in piece.encode("utf-8")]
        while True:
            best = None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        # Added tokens: leftmost-longest literal match.
        ids, i, start = [], 0, 0
        keys = sorted(self.added, key=len, reverse=True)
        segs = []
        while i < len(text):
            hit = next((k for k in keys if text.startswith(k, i)), None)
            if hit:
                if i > start:
                    segs.append((text[start:i], None))
                segs.append((hit, self.added[hit]))
                i += len(hit)
                start = i
            else:
                i += 1
        if start < len(text):
            segs.append((text[start:], None))
        for s, aid in segs:
            if aid is not None:
                ids.append(aid)
            else:
                for p in self.pretokenize(s):
                    ids += self.bpe(p)
        return ids


def llama2c_encode(path, text):
    b = open(path, "rb").read()
    o, pieces, scores = 4, [], []
    while o < len(b):
        s, n = struct.unpack_from("<fi", b, o)
        o += 8
        pieces.append(b[o:o + n])
        scores.append(s)
        o += n
    look = {}
    for i, p in enumerate(pieces):
        look.setdefault(p, i)
    toks = [look[b" "]] if text else []
    data = text.encode("utf-8")
    buf = b""
    for k, c in enumerate(data):
        if c & 0xC0 != 0x80:
            buf = b""
        buf += bytes([c])
        if k + 1 < len(data) and data[k + 1] & 0xC0 == 0x80 and len(buf) < 4:
            continue
        toks += [look[buf]] if buf in look else [x + 3 for x in buf]
        buf = b""
    while True:
        best = (-1e10, -1, -1)
        for i in range(len(toks) - 1):
            j = look.get(pieces[toks[i]] + pieces[toks[i + 1]])
            if j is not None and scores[j] > best[0]:
                best = (scores[j], j, i)
        if best[2] < 0:
            break
        toks[best[2]:best[2] + 2] = [best[1]]
    return toks


def stress_text(seed, n):
    """Deterministic mixed-script text: CJK, kana, Hangul, RTL, Indic, emoji (ZWJ, flags,
    skin tones), combining marks, digits of several scripts, odd whitespace, code."""
    import random
    rnd = random.Random(seed)
    chunks = ["你好世界", "日本語のテキスト", "カタカナ", "한국어 텍스트", "Ελληνικά", "русский язык",
              "العربية", "हिन्दी", "ไทย", "👨\u200d👩\u200d👧\u200d👦", "👍🏽", "🇯🇵", "🏳️\u200d🌈",
              "é", "ñ", "ü", "\u0301", "123456789", "٣٤٥", "½", "Ⅻ", "  ", "\t", "\n", "\r\n",
              " \n ", "...", "!?", "—", "«»", "'s", "'ll", "hello", "World", "x.append(y)", "a_b",
              "#include <stdio.h>", "\u00a0", "\u3000", "\u2028", "$$", "≥≤", "∑", "(", ")", "{}",
              "[]", "@user", "https://x.com/a?b=1", "    return x;", "\tif (a) {"]
    return "".join(rnd.choice(chunks) + rnd.choice(["", " ", "", "\n"]) for _ in range(n))


def write_golden(path):
    ds = RefBpe(os.path.join(REPO, "models/tokenizers/deepseek-v3/tokenizer.json.gz"))
    tok512 = os.path.join(REPO, "testdata/tokenizers/tok512.bin")
    text = stress_text(7, 3000)
    lines = [l for l in stress_text(11, 400).split("\n") if l][:80]
    out = {
        "about": "Expected ids from derive_expected.py (independent Python reference)",
        "deepseek_v3": {"text": text, "ids": ds.encode(text)},
        "tok512": [{"text": l, "ids": llama2c_encode(tok512, l)} for l in lines],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-golden"]:
        write_golden(os.path.join(ROOT, "tokenizer_expected.json"))
        sys.exit(0)
    ds = RefBpe(os.path.join(REPO, "models/tokenizers/deepseek-v3/tokenizer.json.gz"))
    cases = sys.argv[1:] or [
        "Hello world 123456",
        "The quick brown fox jumps over the lazy dog.",
        "你好，世界！今天天气很好。",
        "def f(x):\n\tif x > 0:\n\t\treturn x  # positive\n    return -x\n",
        "👨‍👩‍👧‍👦 family, 👍🏽 ok",
        "Ünïcödé Ελληνικά русский 日本語のテキスト 한국어",
        "<｜begin▁of▁sentence｜>Hi<｜User｜>",
    ]
    for c in cases:
        print("DS", json.dumps(c, ensure_ascii=False), ds.pretokenize(c), ds.encode(c))
    tok512 = os.path.join(REPO, "testdata/tokenizers/tok512.bin")
    for c in ["Once upon a time", "Lily's mom said, \"Hi!\"\n", "caf\u00e9"]:
        print("L2C", json.dumps(c, ensure_ascii=False), llama2c_encode(tok512, c))
