// oomb tokenize: text (a file, JSON lines, or a directory of them) -> a token file, once, so
// training does not tokenize again. For one plain text file the output holds exactly the ids of
// its whole content (no BOS/EOS); documents of JSON lines or directories each end with EOS. With
// --prompt-field and --completion-field, the loss mask beside it (OUTPUT.mask: the prompts' tokens
// not trained; data/loss_mask_file.h), which `oomb train --data OUTPUT` reads.
#include <omp.h>

#include <cstring>
#include <fmt/format.h>
#include <iostream>

#include "cli/commands.h"
#include "data/text_corpus.h"
#include "cli/guards.h"
#include "cli/prompt_fields.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/eos.h"
#include "data/loss_mask_file.h"
#include "data/token_store.h"
#include "data/tokenize_corpus.h"

namespace oomb::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer, input, output, format = "u32", input_format = "auto", text_field = "text", eos,
      utf8_errors = "strict";
  int threads = 0;
  bool split_special = false, quiet = false, text_field_given = false;
  PromptFields prompt_fields;
};

// Writes ids in the chosen format through an AtomicFile (nothing appears until it is complete).
class TokenWriter {
 public:
  TokenWriter(const std::string& path, TokenFormat fmt, int64_t id_limit)
      : file_(path), fmt_(fmt), wide_(fmt == TokenFormat::U32 || (fmt == TokenFormat::LlmC && id_limit > 65536)) {
    if (fmt_ == TokenFormat::LlmC) {
      std::vector<char> header(kLlmcHeaderBytes, 0);
      file_.write(header.data(), header.size());
    }
  }
  void put(std::span<const int32_t> ids) {
    const size_t at = buf_.size(), w = wide_ ? 4 : 2;
    buf_.resize(at + ids.size() * w);
    char* p = buf_.data() + at;
    for (int32_t id : ids) {
      if (!wide_)
        OOMB_CHECK(id <= 0xFFFF, "--format {}: token id {} does not fit in 16 bits; use --format u32",
                   token_format_name(fmt_), id);
      const uint32_t u = uint32_t(id);
      const unsigned char le[4] = {uint8_t(u), uint8_t(u >> 8), uint8_t(u >> 16), uint8_t(u >> 24)};
      std::memcpy(p, le, w);
      p += w;
    }
    count_ += int64_t(ids.size());
    if (buf_.size() >= (1 << 20)) flush();
  }
  void commit() {
    flush();
    if (fmt_ == TokenFormat::LlmC) {
      OOMB_CHECK(count_ < INT32_MAX, "--format llmc: {} tokens exceed the format's int32 count", count_);
      const int32_t h[3] = {wide_ ? kLlmcMagicLlama3 : kLlmcMagicGpt2, wide_ ? kLlmcVersionU32 : kLlmcVersionU16,
                            int32_t(count_)};
      file_.write_at(0, h, sizeof h);  // little-endian hosts only (as is every supported machine)
    }
    file_.commit();
  }
  bool wide() const { return wide_; }

 private:
  void flush() {
    file_.write(buf_.data(), buf_.size());
    buf_.clear();
  }
  AtomicFile file_;
  TokenFormat fmt_;
  bool wide_;
  std::vector<char> buf_;
  int64_t count_ = 0;
};

int run(const TokenizeArgs& a) {
  // before anything is opened for writing: the output must not be the text or the tokenizer
  const std::filesystem::path mask_path = loss_mask_path(a.output);
  refuse_aliasing({{"--output", a.output}, {"--output's loss mask", mask_path.string()}},
                  {{"--input", a.input, true}, {"--tokenizer", a.tokenizer, true}});
  check_file_out("--output", a.output);  // (its folder: named now, not as a temporary file it cannot create)
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const Tokenizer tok = Tokenizer::load(a.tokenizer);
  CorpusOptions co;
  co.format = text_format_parse(a.input_format);
  co.text_field = a.text_field;
  if (a.text_field_given) check_text_field_read({a.input}, a.input_format, a.text_field);
  apply_prompt_fields(a.prompt_fields, co, a.tokenizer);
  co.utf8 = utf8_errors_parse(a.utf8_errors);
  co.allow_cuts = tok.cut_after_newline_is_safe();
  const TextCorpus corpus(a.input, co);
  TokenizeOptions to;
  to.split_special = a.split_special;
  to.progress = a.quiet ? nullptr : &std::cerr;
  std::string eos_from;
  if (!corpus.single_document()) {
    if (!a.eos.empty()) {
      to.eos = parse_eos(a.eos, tok), eos_from = "--eos";
    } else {
      const EosChoice e = resolve_eos(a.tokenizer, vocab_next_to(a.tokenizer, tok), &tok);
      OOMB_CHECK(e.id >= 0, "--input {} holds several documents, and nothing next to --tokenizer {} names an EOS to "
                 "separate them (config.json eos_token_id or tokenizer_config.json eos_token): give --eos",
                 a.input, a.tokenizer);
      to.eos = e.id, eos_from = e.from;
    }
  }
  const TokenFormat fmt = token_format_parse(a.format);
  TokenWriter out(a.output, fmt, tok.id_limit());
  const bool masked = co.masked();
  LossMaskBuilder trained;
  const TokenizeStats st = tokenize_corpus(corpus, tok, to, [&](std::span<const int32_t> ids, bool t) {
    out.put(ids);
    if (masked) trained.append(int64_t(ids.size()), t);
  });
  OOMB_CHECK(st.tokens > 0, "--input {}: its text gives no tokens (every document is empty); nothing written", a.input);
  out.commit();
  // the mask beside the ids, or none: a mask left from an earlier run would not match them (a file
  // of that name that is no mask is not ours to remove)
  if (masked) {
    write_loss_mask(mask_path, trained, FileTokens(a.output, fmt));
  } else if (holds_loss_mask(mask_path)) {
    std::error_code ec;
    std::filesystem::remove(mask_path, ec);
    OOMB_CHECK(!ec, "{}: cannot remove the loss mask of the ids tokenized before: {}", mask_path.string(), ec.message());
  }
  std::cout << fmt::format("oomb tokenize: {} ({} document{}, {:.2f} MB) -> {}: {} tokens ({}{}) in {:.3f} s, "
                           "{:.1f} MB/s, {} threads{}{}",
                           a.input, st.documents, st.documents == 1 ? "" : "s", double(st.bytes) / 1e6, a.output,
                           st.tokens, token_format_name(fmt), fmt == TokenFormat::LlmC ? (out.wide() ? " uint32" : " uint16") : "",
                           st.seconds, double(st.bytes) / 1e6 / std::max(st.seconds, 1e-9), omp_get_max_threads(),
                           // (why a long document keeps one core: see Tokenizer::cut_after_newline_is_safe)
                           co.allow_cuts ? "" : " (one per document: this tokenizer's text cannot be cut exactly)",
                           to.eos >= 0 ? fmt::format("; each document ends with EOS {} (from {})", to.eos, eos_from) : "")
            << (masked ? fmt::format("; {} of them {}, not trained: the loss mask -> {}", st.untrained,
                                     co.messages_field.empty() ? "in prompts" : "context only", mask_path.string())
                       : "")
            << std::endl;
  return 0;
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* c = app.add_subcommand("tokenize", "Tokenize text once into a token file for `oomb train --data`");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json, or a model directory holding one")->required();
  c->add_option("--input", a->input, "Text: a file, a JSON-lines file, or a directory of them")->required();
  c->add_option("--output", a->output, "Token file to write (replaced atomically)")->required();
  c->add_option("--format", a->format, "u32 (raw little-endian uint32), u16 (nanoGPT), llmc (llm.c shard)")
      ->check(CLI::IsMember({"u32", "u16", "llmc"}))->capture_default_str();
  c->add_option("--input-format", a->input_format, "auto (.jsonl, .ndjson and .json are JSON lines), text or jsonl")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))->capture_default_str();
  c->add_option("--text-field", a->text_field, "JSON lines: the field holding the text")->capture_default_str();
  add_prompt_fields(c, a->prompt_fields);
  c->add_option("--eos,--eos-id", a->eos, "Id or token ending each document (default: from config.json or tokenizer_config.json)");
  c->add_flag("--split-special-tokens", a->split_special, "Encode special tokens found in the text as plain text");
  c->add_option("--utf8-errors", a->utf8_errors, "strict (invalid UTF-8 is an error) or replace (with U+FFFD)")
      ->check(CLI::IsMember({"strict", "replace"}))->capture_default_str();
  c->add_option("--threads", a->threads, "Encoding threads (default: all cores)")->check(count());
  c->add_flag("--quiet", a->quiet, "No progress bar");
  return {c, [a, c] {
            a->text_field_given = c->count("--text-field") > 0;
            return run(*a);
          }};
}

}  // namespace oomb::cli
