#include "data/open_data.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "data/loss_mask_file.h"
#include "data/tokenize_corpus.h"
#include "data/visible_files.h"

namespace oomb {

namespace fs = std::filesystem;

static bool is_token_format(const std::string& f) { return f == "u32" || f == "u16" || f == "llmc"; }

// The files of dir that are data: token files' masks (FILE.mask) aside.
static std::vector<fs::path> data_files(const fs::path& dir) {
  std::vector<fs::path> files = visible_files(dir);
  std::erase_if(files, [](const fs::path& f) { return is_loss_mask_file(f); });
  return files;
}

bool is_token_data(const fs::path& path, const std::string& format) {
  if (is_token_format(format)) return true;
  if (format == "text" || format == "jsonl") return false;
  OOMB_CHECK(format == "auto", "--data-format: '{}' is not one of auto, u32, u16, llmc, text, jsonl", format);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path.extension() == ".bin";
  const auto files = data_files(path);
  OOMB_CHECK(!files.empty(), "--data {}: the directory holds no files", path.string());
  const auto bins = std::count_if(files.begin(), files.end(), [](const fs::path& p) { return p.extension() == ".bin"; });
  OOMB_CHECK(bins == 0 || size_t(bins) == files.size(),
             "--data {}: the directory mixes {} token files (.bin) with {} other files; keep them apart",
             path.string(), bins, files.size() - size_t(bins));
  return bins > 0;
}

void check_held_out_fits_a_window(const PackedTokens& data, int64_t N, const std::string& flag,
                                  const std::string& path) {
  if (data.whole() || N + 1 <= data.stream_size()) return;
  fail("{} {}: {} tokens, fewer than a window's {} (--seq-len {} and the token after it): the window would wrap and "
       "hold the data twice, and a model scores the repeat by copying; give --seq-len {} or less, or more held-out data",
       flag, path, data.stream_size(), N + 1, N, data.stream_size() - 1);
}

static std::unique_ptr<TokenStore> open_token_file(const fs::path& p, const std::string& format) {
  // llm.c shards are found by their magic, unless a format is named
  const TokenFormat f = format == "auto" ? sniff_token_format(p, TokenFormat::U32) : token_format_parse(format);
  return std::make_unique<FileTokens>(p, f);
}

std::unique_ptr<PackedTokens> open_training_data(const fs::path& path, int64_t vocab, const DataOptions& o) {
  std::error_code ec;
  OOMB_CHECK(fs::exists(path, ec), "--data {}: cannot open: no such file or directory", path.string());
  OOMB_CHECK(!is_loss_mask_file(path), "--data {}: is a token file's loss mask; give the token file beside it",
             path.string());
  const bool masked = o.corpus.masked();
  if (is_token_data(path, o.format)) {
    std::vector<fs::path> files{path};
    if (fs::is_directory(path, ec)) files = data_files(path);
    const bool has_masks =
        std::any_of(files.begin(), files.end(), [](const fs::path& f) { return fs::exists(loss_mask_path(f)); });
    // given the fields, every file must bring its mask (one without would train its prompts)
    const auto unmasked =
        std::find_if(files.begin(), files.end(), [](const fs::path& f) { return !fs::exists(loss_mask_path(f)); });
    OOMB_CHECK(!masked || unmasked == files.end(), "--data {}: token file {} has no mask beside it; --prompt-field, "
               "--completion-field and --messages-field are read when text is tokenized (`oomb tokenize` with them "
               "writes each file's mask beside it, FILE.mask, which --data reads)", path.string(),
               unmasked == files.end() ? "" : unmasked->string());
    std::vector<std::unique_ptr<TokenStore>> parts;
    for (const auto& f : files) parts.push_back(open_token_file(f, o.format));
    // the masks beside the files (a file without one: every token trained)
    std::unique_ptr<LossMask> mask;
    if (has_masks) {
      LossMaskBuilder bits;
      for (size_t i = 0; i < files.size(); ++i) {
        if (fs::exists(loss_mask_path(files[i]))) read_loss_mask(loss_mask_path(files[i]), *parts[i], bits);
        else bits.append(parts[i]->size(), true);
      }
      mask = std::make_unique<LossMask>(bits);
    }
    std::unique_ptr<TokenStore> store =
        parts.size() == 1 ? std::move(parts[0]) : std::make_unique<ConcatTokens>(std::move(parts));
    return std::make_unique<PackedTokens>(std::move(store), vocab, o.packing, std::move(mask));
  }
  OOMB_CHECK(!o.tokenizer.empty(), "--data {}: is text; give --tokenizer (a tokenizer.json or a directory holding "
             "one; the --model directory is used when it has one)", path.string());
  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  OOMB_CHECK(tok.id_limit() <= vocab, "--tokenizer {}: its ids reach {}, beyond the model's vocabulary ({})",
             tok.source(), tok.id_limit() - 1, vocab);
  CorpusOptions co = o.corpus;
  co.format = o.format == "jsonl" ? TextFormat::Jsonl : o.format == "text" ? TextFormat::Text : TextFormat::Auto;
  co.allow_cuts = tok.cut_after_newline_is_safe();
  const TextCorpus corpus(path, co);
  TokenizeOptions to;
  to.eos = corpus.single_document() ? -1 : o.packing.eos;
  OOMB_CHECK(corpus.single_document() || to.eos >= 0, "--data {}: holds several documents; their separator needs "
             "the model's eos_token_id in config.json, or --eos-id", path.string());
  to.split_special = o.split_special;
  to.progress = o.log;
  std::vector<uint32_t> ids;
  LossMaskBuilder trained;
  const TokenizeStats st = tokenize_corpus(corpus, tok, to, [&](std::span<const int32_t> s, bool t) {
    ids.insert(ids.end(), s.begin(), s.end());
    if (masked) trained.append(int64_t(s.size()), t);
  });
  OOMB_CHECK(!ids.empty(), "--data {}: its text gives no tokens (every document is empty)", path.string());
  if (o.log)
    *o.log << fmt::format("tokenized {} ({} documents, {:.1f} MB) into {} tokens{} in {:.2f} s ({:.1f} MB/s); "
                          "`oomb tokenize` saves this for the next run\n",
                          path.string(), st.documents, double(st.bytes) / 1e6, st.tokens,
                          masked ? fmt::format(" ({} {}, not trained)", st.untrained, o.corpus.messages_field.empty() ? "in prompts" : "context only") : "", st.seconds,
                          double(st.bytes) / 1e6 / std::max(st.seconds, 1e-9));
  return std::make_unique<PackedTokens>(std::make_unique<MemoryTokens>(ids, path.string() + " (tokenized)"), vocab,
                                        o.packing, masked ? std::make_unique<LossMask>(trained) : nullptr);
}

}  // namespace oomb
