// oomb eval: a model on held-out data (the train command's data flags), chunk-recurrent like
// training: mean loss, perplexity, accuracy and the loss by position (train/eval.h), of one set or
// of several (--data given more than once: each set's, and over every set's targets); or, with
// --passkey, passkey retrieval over lengths x depths (train/passkey_eval.h). A table on stdout, or
// JSON (--json on stdout, --out FILE.json written atomically); tools/plot_eval.py draws the JSON.
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "data/text_corpus.h"
#include "cli/dist_flags.h"
#include "cli/guards.h"
#include "cli/load_model.h"
#include "core/atomic_file.h"
#include "data/eos.h"
#include "data/open_data.h"
#include "data/window_sets.h"
#include "hf/checkpoint.h"
#include "train/eval.h"
#include "train/passkey_eval.h"

#include "cli/prompt_fields.h"
#include "cli/rope_flags.h"

namespace oomb::cli {

namespace {
struct EvalArgs {
  std::vector<std::string> data;  // one held-out set, or several
  std::string model, data_format = "auto", tokenizer, text_field = "text", utf8_errors = "strict";
  bool text_field_given = false;
  std::string device = "cpu", out, lora, precision, packing = "wrapped";
  DistOptions dist;
  PromptFields prompt_fields;
  RopeFlags rope;
  bool rope_changed = false;  // the run's RoPE is not --model's (the flags, the adapter's)
  std::string eos;  // --eos-id: an id or a token
  int64_t seq_len = 2048, chunk = 1024, page = 128, buckets = 16, trials = 4;
  std::vector<int64_t> windows;  // --windows: one count for every set, or one per set
  int digits = 5;
  bool split_special = false, json = false, passkey = false;
  std::vector<int64_t> lengths{1024, 4096};
  std::vector<double> depths{0, 0.25, 0.5, 0.75, 1};
  uint64_t seed = 0;
};

std::filesystem::path tokenizer_file(const EvalArgs& a) {
  namespace fs = std::filesystem;
  if (a.tokenizer.empty()) return fs::path(a.model) / "tokenizer.json";
  return fs::is_directory(a.tokenizer) ? fs::path(a.tokenizer) / "tokenizer.json" : fs::path(a.tokenizer);
}

// The model of --model, with --lora's adapter on it, on --sp's ranks (the plan is this rank's).
std::unique_ptr<Model> load_model(const EvalArgs& a, const ModelConfig& cfg, Backend& be, ChunkPlan plan,
                                  Dist& dist) {
  set_dist(a.dist, dist.rank(), plan);
  check_comm_device(a.dist, a.device);
  plan.device_comm = dist.device_comm();
  plan.precision = precision_dtype(a.precision, a.device);
  plan.kv_dtype = kv_page_dtype("auto", plan.precision);
  return load_model_and_adapter(a.model, a.lora, cfg, be, plan, &dist.tensor_sp());
}

void emit(const EvalArgs& a, const nlohmann::json& j, const std::string& table) {
  if (!a.out.empty()) write_file_atomic(a.out, j.dump(2) + "\n");
  if (a.json) {
    std::cout << j.dump(2) << std::endl;
  } else {
    std::cout << table;
    if (!a.out.empty()) std::cout << "wrote " << a.out << " (plot: tools/plot_eval.py " << a.out << ")" << std::endl;
  }
}

int run_loss(const EvalArgs& a, const ModelConfig& cfg, Backend& be, Dist& dist) {
  OOMB_CHECK(!a.data.empty(), "--data is required (or --passkey)");
  const int64_t N = a.seq_len, C = eval_chunk_size(N, a.buckets, a.chunk);
  static std::ostream quiet(nullptr);  // ranks other than 0 say nothing
  std::ostream* log = !dist.leader() ? &quiet : a.json ? &std::cerr : &std::cout;
  DataOptions d;
  d.format = a.data_format;
  d.corpus.text_field = a.text_field;
  if (a.text_field_given) check_text_field_read(a.data, a.data_format, a.text_field);
  const auto tp = tokenizer_file(a);
  apply_prompt_fields(a.prompt_fields, d.corpus, tp);
  d.corpus.utf8 = utf8_errors_parse(a.utf8_errors);
  if (!a.tokenizer.empty() || std::filesystem::exists(tp)) d.tokenizer = tp;
  d.split_special = a.split_special;
  const int32_t eos = a.eos.empty() ? resolve_eos(a.model, cfg.vocab).id : eos_flag(a.eos, cfg.vocab, tp);
  d.packing = {eos, false, 0, false, a.packing == "whole"};
  d.log = log;
  // each set over --windows (default: its whole windows, at least one), with notes where it is short of them
  OOMB_CHECK(a.windows.size() <= 1 || a.windows.size() == a.data.size(),
             "--windows: {} counts for {} --data sets (one count for every set, or one per set)", a.windows.size(),
             a.data.size());
  std::vector<WindowSet> sets;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const std::string& path = a.data[i];
    const std::string name = a.data.size() > 1 ? path + ": " : "";
    auto data = open_training_data(path, cfg.vocab, d);
    const int64_t fit = data->windows_per_epoch(N);
    const int64_t W = a.windows.empty() ? fit : a.windows[a.windows.size() == 1 ? 0 : i];
    if (data->whole()) *log << name << data->whole_summary(N) << std::endl;
    check_held_out_fits_a_window(*data, N, "--data", path);
    if (W > fit)
      *log << fmt::format("note: {}{} windows of {} tokens are more than the data's {} tokens{}: windows wrap around",
                          name, W, N, data->stream_size(), data->whole() ? fmt::format(" ({} windows)", fit) : "")
           << std::endl;
    sets.push_back({std::move(data), path, W});
  }
  int64_t W = 0;  // every set's
  for (const WindowSet& s : sets) W += s.windows;
  std::unique_ptr<TokenSource> data;
  if (sets.size() == 1) data = std::move(sets[0].data);
  else data = std::make_unique<WindowSets>(std::move(sets));
  auto model = load_model(a, cfg, be, ChunkPlan{C, a.page}, dist);
  if (const std::string note = rope_reach_note(cfg, N); !note.empty() && !a.rope_changed) *log << note << std::endl;
  *log << fmt::format("oomb eval: {}{} on {}, {} windows of {} tokens, chunks of {}, {} buckets; --precision {}",
                      a.model, a.lora.empty() ? "" : " with the adapter " + a.lora, data->describe(), W, N, C,
                      a.buckets, default_precision(a.precision, a.device))
       << (dist.size() > 1 ? fmt::format("; {} ranks: --sp {} x --dp {}", dist.size(), a.dist.sp, a.dist.dp) : "")
       << std::endl;
  if (const std::string t = describe(dist.threads()); !t.empty()) *log << t << std::endl;
  // dp rank d scores windows d, d + dp, ...; the sums are added over the dp group
  EvalResult r = evaluate_by_position(*model, *data, N, W, a.buckets, log, dist.dp_rank(), a.dist.dp);
  if (a.dist.dp > 1) {
    std::vector<double> sums = eval_sums(r);
    dist.dp().all_reduce_sum(sums.data(), sums.size());
    set_eval_sums(r, sums);
  }
  OOMB_CHECK(r.targets > 0, "eval: the data gave no targets to score");
  for (size_t s = 0; s < r.sets.size(); ++s)
    OOMB_CHECK(r.sets[s].targets > 0, "--data {}: its {} windows of {} tokens hold no target to score (every token in "
               "a prompt)", a.data[s], r.sets[s].windows, N);
  if (!dist.leader()) return 0;
  nlohmann::json j = to_json(r);
  j["model"] = a.model, j["precision"] = default_precision(a.precision, a.device);
  j["data"] = a.data.size() == 1 ? nlohmann::json(a.data[0]) : nlohmann::json(a.data);
  std::string per_set;
  for (size_t s = 0; s < r.sets.size(); ++s) {
    j["sets"][s]["data"] = a.data[s];
    const EvalResult& e = r.sets[s];
    per_set += fmt::format("{}: loss {:.4f}  perplexity {:.3f}  accuracy {:.2f}%  ({} windows, {} targets)\n",
                           a.data[s], e.loss(), e.perplexity(), 100 * e.accuracy(), e.windows, e.targets);
  }
  if (!a.lora.empty()) j["lora"] = a.lora;
  if (a.rope_changed) j["rope"] = rope_json(cfg);
  emit(a, j,
       per_set + fmt::format("{}loss {:.4f}  perplexity {:.3f}  accuracy {:.2f}%  ({} targets)\nloss by position{}:\n{}",
                             r.sets.empty() ? "" : fmt::format("all {} sets: ", r.sets.size()), r.loss(),
                             r.perplexity(), 100 * r.accuracy(), r.targets, r.sets.empty() ? "" : " (every set)",
                             format_table(r)));
  return 0;
}

int run_passkey_cmd(const EvalArgs& a, const ModelConfig& cfg, Backend& be) {
  std::optional<Tokenizer> tok;
  const auto tp = tokenizer_file(a);
  if (!a.tokenizer.empty() || std::filesystem::exists(tp)) {
    OOMB_CHECK(std::filesystem::exists(tp), "--tokenizer: {} does not exist", tp.string());
    tok = Tokenizer::load(tp);
  }
  const PasskeyPrompts prompts = tok ? PasskeyPrompts::text(&*tok, a.digits) : PasskeyPrompts::tokens(cfg.vocab, a.digits);
  const int64_t longest = *std::max_element(a.lengths.begin(), a.lengths.end()) + prompts.answer_tokens();
  Dist one;  // (refused with several ranks: decoding reads every position's logits)
  auto model = load_model(a, cfg, be, ChunkPlan{std::min(a.chunk, longest), a.page}, one);
  std::ostream* log = a.json ? &std::cerr : &std::cout;
  *log << "oomb eval --passkey: " << a.model << ", " << prompts.describe() << ", " << a.trials << " prompts per cell"
       << std::endl;
  if (const std::string note = rope_reach_note(cfg, longest); !note.empty() && !a.rope_changed) *log << note << std::endl;
  const PasskeyResult r = run_passkey(*model, prompts, a.lengths, a.depths, a.trials, a.seed, log);
  nlohmann::json j = to_json(r, tok ? "text" : "tokens");
  j["model"] = a.model;
  if (!a.lora.empty()) j["lora"] = a.lora;
  if (a.rope_changed) j["rope"] = rope_json(cfg);
  emit(a, j, "passkey accuracy (rows: prompt length; columns: depth of the key)\n" + format_table(r));
  return 0;
}
}  // namespace

Command add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* c = app.add_subcommand("eval", "Evaluate a model: held-out loss, perplexity and loss by position, or "
                                   "passkey retrieval (--passkey)");
  c->add_option("--model", a->model, "Hugging Face model directory")->required()->check(model_dir());
  c->add_option("--data", a->data, "Held-out data, as oomb train reads it (token files or text). Given more than "
                "once: each set scored over its own --windows, and the loss over every set's targets")
      ->allow_extra_args(false);
  c->add_option("--data-format", a->data_format, "auto, u32, u16 (nanoGPT), llmc, text or jsonl")
      ->check(CLI::IsMember({"auto", "u32", "u16", "llmc", "text", "jsonl"}))->capture_default_str();
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json or a directory with one (default: --model's)");
  c->add_option("--text-field", a->text_field, "JSON-lines data: the field holding the text")->capture_default_str();
  add_prompt_fields(c, a->prompt_fields);
  c->add_option("--packing", a->packing, "How documents fill the windows, as oomb train's --packing: wrapped or whole")
      ->check(CLI::IsMember({"wrapped", "whole"}))->capture_default_str();
  c->add_option("--utf8-errors", a->utf8_errors, "Text data: strict or replace")
      ->check(CLI::IsMember({"strict", "replace"}))->capture_default_str();
  c->add_flag("--split-special-tokens", a->split_special, "Text data: special tokens in the text stay plain text");
  c->add_option("--eos-id,--eos", a->eos, "Id or token ending each document (default: the model's eos_token_id)");
  c->add_option("--seq-len", a->seq_len, "Tokens per window N")->check(count())->capture_default_str();
  c->add_option("--windows", a->windows, "Windows to score, of each --data: one count for every set, or one per set "
                "(3,5; default: every whole window of it)")
      ->delimiter(',')->check(count());
  c->add_option("--buckets", a->buckets, "Loss by position: N cut into this many equal buckets (default: 16, or the "
                "most below it that divide N)")
      ->check(count())->capture_default_str();
  c->add_option("--chunk-size", a->chunk, "Largest chunk C (the chunk is the largest C dividing N / buckets)")
      ->check(count())->capture_default_str();
  c->add_option("--page-size", a->page, "Tokens per KV page")->check(count())->capture_default_str();
  c->add_option("--device", a->device, "cpu, sim or cuda")->check(CLI::IsMember({"cpu", "sim", "cuda"}))->capture_default_str();
  add_precision_flag(c, a->precision, "the matmuls (LoRA's adapters too)");
  c->add_flag("--json", a->json, "Print the result as JSON (progress goes to stderr)");
  c->add_option("--out", a->out, "Write the result as JSON to this file (tools/plot_eval.py FILE draws it)");
  c->add_flag("--passkey", a->passkey, "Passkey retrieval instead of held-out loss");
  c->add_option("--lengths", a->lengths, "--passkey: prompt lengths in tokens")->delimiter(',')->check(count())
      ->capture_default_str();
  c->add_option("--depths", a->depths, "--passkey: depths of the key in the filler, 0 (start) to 1 (end)")
      ->delimiter(',')->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--trials", a->trials, "--passkey: prompts (keys) per length and depth")->check(count())
      ->capture_default_str();
  c->add_option("--digits", a->digits, "--passkey: digits of the key")->check(CLI::Range(1, 18))->capture_default_str();
  c->add_option("--seed", a->seed, "--passkey: seed of the keys and filler")->check(count(true))->capture_default_str();
  c->add_option("--lora", a->lora, "A PEFT LoRA adapter directory (oomb train's --out with LoRA, or a checkpoint of "
                "a LoRA run) evaluated on --model as its base");
  add_rope_flags(c, a->rope);
  add_dist_flags(c, a->dist, true);
  return {c, [a, c] {
            a->text_field_given = c->count("--text-field") > 0;
            if (c->count("--buckets") == 0)  // the default: the most buckets up to 16 that divide N
              while (a->buckets > 1 && (a->buckets > a->seq_len || a->seq_len % a->buckets != 0)) --a->buckets;
            std::vector<NamedPath> inputs = {{"--model", a->model, true}, {"--tokenizer", a->tokenizer, true},
                                             {"--lora", a->lora, true}};
            for (const std::string& d : a->data) inputs.push_back({"--data", d, true});
            refuse_aliasing({{"--out", a->out}}, inputs);
            check_file_out("--out", a->out);  // (written at the end: refused now, not after every window)
            OOMB_CHECK(a->dist.zero == 0, "--zero: evaluation has no optimizer state to shard");
            Dist dist(a->dist);  // the ranks mpirun started, or this process alone
            if (!dist.leader()) std::cout.rdbuf(nullptr);  // rank 0 alone prints (errors: every rank)
            static std::ostream quiet(nullptr);
            const ModelConfig cfg = run_config(a->model, a->lora, a->rope,
                                               !dist.leader() ? quiet : a->json ? std::cerr : std::cout,
                                               &a->rope_changed);
            OOMB_CHECK(!a->passkey || dist.size() == 1, "--passkey with --sp/--dp: not supported (greedy decoding "
                       "reads every position's logits, which --sp splits over the ranks); run it on one rank");
            auto be = make_backend(a->device, 0, local_rank());
            dist.attach(*be);
            return a->passkey ? run_passkey_cmd(*a, cfg, *be) : run_loss(*a, cfg, *be, dist);
          }};
}

}  // namespace oomb::cli
