// The RoPE flags (--rope-theta, --rope-scaling, --rope-factor, --rope-original-max,
// --max-position-embeddings): a model's RoPE changed for a run is the model whose config.json says
// so, in every field, in training, saving, checkpoints and resuming; a LoRA adapter records the RoPE
// it was trained under, and eval, generate and merge put it back on the base.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/rope_flags.h"
#include "core/error.h"
#include "hf/config.h"
#include "metrics_plan.h"
#include "model/init.h"
#include "model/rope.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using oomb::cli::RopeFlags;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<float> inv(const ModelConfig& c, float* att = nullptr) { return rope_inv_freq(c, att); }

ModelConfig apply(const ModelConfig& c, const RopeFlags& f) { return cli::apply_rope_flags(c, f, "m"); }

// c's config.json with `edit` applied, parsed as a model directory's would be
ModelConfig edited(const ModelConfig& c, const std::function<void(json&)>& edit) {
  json j = config_to_json(c);
  edit(j);
  return parse_config(j, "edited config.json");
}

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> v;
  for (const json& l : metrics_lines(metrics)) v.push_back(l["loss"].get<double>());
  return v;
}

json rope_of(const fs::path& model_dir) { return rope_json(load_config(model_dir)); }

// A tiny Qwen2 model (default RoPE, theta 10000, max_position_embeddings 4096), tokens, and the same
// model with its config.json edited to the RoPE the flags below ask for.
struct Dirs {
  fs::path dir;
  std::string d;
  static constexpr const char* kFlags = "--rope-theta 50000 --rope-scaling yarn --rope-factor 4";
  explicit Dirs(const std::string& hint) : dir(temp_dir(hint)), d(dir.string()) {
    EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny-qwen2 --out {}/m", d)).code, 0);
    write_tokens(dir / "d.bin", 4000, 128, 5);
    fs::create_directories(dir / "e");
    fs::copy(dir / "m", dir / "e", fs::copy_options::recursive);
    json j = json::parse(read_text(dir / "m/config.json"));
    j["rope_theta"] = 50000.0;
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}};
    j["max_position_embeddings"] = 4 * 4096;  // (the scaled context, as the flags declare it)
    write_bytes(dir / "e/config.json", j.dump(2));
  }
  std::string train(const std::string& model, const std::string& flags) const {
    return fmt::format("train --model {0}/{1} --data {0}/d.bin --seq-len 128 --chunk-size 32 --page-size 16 --lr 1e-2 "
                       "{2}", d, model, flags);
  }
};

}  // namespace

// Each flag sets its field, and the run's config is the config.json edited to say the same: the
// same inv_freq and attention scaling. A scaling switched on keeps the positions it scales from, so
// that --max-position-embeddings does not move it (it would in the config left without them: the
// control).
TEST(RopeFlags, EachFlagIsTheConfigEditedToSayIt) {
  const ModelConfig q = preset_config("tiny-qwen2");
  ASSERT_EQ(q.rope.type, "default");
  const int64_t M = q.max_position_embeddings;

  RopeFlags f;
  f.theta = 5e5;
  ModelConfig c = apply(q, f);
  EXPECT_EQ(c.rope.theta, 5e5);
  EXPECT_EQ(inv(c), inv(edited(q, [](json& j) { j["rope_theta"] = 5e5; })));
  EXPECT_NE(inv(c), inv(q));

  f = {};
  f.scaling = "yarn", f.factor = 4;
  c = apply(q, f);
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_EQ(c.rope.factor, 4);
  EXPECT_EQ(c.rope.original_max_position_embeddings, M);
  EXPECT_EQ(c.max_position_embeddings, 4 * M);  // the scaled context declared
  const ModelConfig yarn = edited(q, [](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  float att = 0, att_edited = 0;
  EXPECT_EQ(inv(c, &att), inv(yarn, &att_edited));
  EXPECT_EQ(att, att_edited);
  EXPECT_GT(att, 1.0f);  // (YaRN's 0.1 ln 4 + 1)

  RopeFlags longer;
  longer.max_positions = 8 * M;
  const ModelConfig c8 = apply(c, longer);
  EXPECT_EQ(c8.max_position_embeddings, 8 * M);
  EXPECT_EQ(inv(c8), inv(c));
  EXPECT_NE(inv(edited(yarn, [&](json& j) { j["max_position_embeddings"] = 8 * M; })), inv(c));  // the control
  ASSERT_EQ(yarn.rope.original_max_position_embeddings, 0);  // (a yarn config scaling from max_position_embeddings)
  EXPECT_EQ(inv(apply(yarn, longer)), inv(yarn));

  f = {};
  f.scaling = "linear", f.factor = 8;
  c = apply(q, f);
  EXPECT_EQ(inv(c), inv(edited(q, [](json& j) { j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}}; })));

  f = {};
  f.scaling = "llama3", f.factor = 8, f.original_max = 1024;
  c = apply(q, f);
  EXPECT_EQ(c.rope.low_freq_factor, 1);  // Llama 3.1's
  EXPECT_EQ(c.rope.high_freq_factor, 4);
  EXPECT_EQ(inv(c), inv(edited(q, [](json& j) {
              j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}};
            })));

  // a top-level original_max_position_embeddings (transformers 5's) is the length a scaling switched on
  // stretches from, as in the config edited to have that scaling
  const ModelConfig top = edited(q, [](json& j) { j["original_max_position_embeddings"] = 1024; });
  f = {};
  f.scaling = "yarn", f.factor = 4;
  c = apply(top, f);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 1024);
  EXPECT_EQ(inv(c), inv(edited(top, [](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; })));
  EXPECT_NE(inv(c), inv(apply(q, f)));  // (from 4096: another inv_freq)
  // yarn's factor null is max_position_embeddings / original, as the edited config reads it
  const ModelConfig null_factor = edited(q, [](json& j) {
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 1024}};
  });
  ASSERT_EQ(null_factor.rope.factor, 4);
  f = {};
  f.max_positions = 2 * M;
  c = apply(null_factor, f);
  EXPECT_EQ(c.rope.factor, 8);
  EXPECT_EQ(inv(c), inv(edited(q, [&](json& j) {
              j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 1024}};
              j["max_position_embeddings"] = 2 * M;
            })));

  // a yarn factor the flags set declares original x factor, lower too (some transformers 4.x releases
  // read the factor from it); a null factor follows the lengths instead, as transformers reads it
  const ModelConfig yarn8 = edited(q, [](json& j) {
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 4096}};
    j["max_position_embeddings"] = 32768;
  });
  f = {};
  f.factor = 2;
  EXPECT_EQ(apply(yarn8, f).max_position_embeddings, 8192);
  f = {};
  f.original_max = 2048;
  c = apply(null_factor, f);
  EXPECT_EQ(c.rope.factor, 2);
  EXPECT_EQ(c.max_position_embeddings, M);
  EXPECT_EQ(inv(c), inv(edited(q, [&](json& j) {
              j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 2048}};
            })));

  // on a scaled model: --rope-factor alone keeps the rest of its scaling; none removes it
  const ModelConfig l31 = preset_config("llama-3.1-8b");
  f = {};
  f.factor = 32;
  c = apply(l31, f);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.factor, 32);
  EXPECT_EQ(c.rope.original_max_position_embeddings, l31.rope.original_max_position_embeddings);
  EXPECT_EQ(c.rope.high_freq_factor, l31.rope.high_freq_factor);
  f = {};
  f.scaling = "yarn", f.factor = 16;
  c = apply(l31, f);
  EXPECT_EQ(c.rope.original_max_position_embeddings, l31.rope.original_max_position_embeddings);  // (8192, its own)
  f = {};
  f.scaling = "none";
  c = apply(l31, f);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.rope.theta, l31.rope.theta);
  EXPECT_EQ(config_to_json(c)["rope_scaling"], json(nullptr));

  // no flag: the config itself
  EXPECT_EQ(rope_json(apply(l31, RopeFlags{})), rope_json(l31));
  EXPECT_EQ(cli::rope_change_line(l31, apply(l31, RopeFlags{})), "");
}

// A flag that cannot apply says which and why; an impossible RoPE names the model and the flags.
TEST(RopeFlags, BadFlagsAreNamed) {
  const ModelConfig q = preset_config("tiny-qwen2");
  RopeFlags f;
  f.factor = 4;
  EXPECT_THAT(error_of([&] { apply(q, f); }), HasSubstr("--rope-factor: m's RoPE has no scaling"));
  f = {};
  f.scaling = "yarn";
  EXPECT_THAT(error_of([&] { apply(q, f); }), HasSubstr("--rope-scaling yarn needs --rope-factor (the model's RoPE: "
                                                        "no scaling)"));
  f.factor = 0.5;
  EXPECT_THAT(error_of([&] { apply(q, f); }), HasSubstr("the factor is at least 1"));
  f = {};
  f.scaling = "linear", f.factor = 2, f.original_max = 1024;
  EXPECT_THAT(error_of([&] { apply(q, f); }), HasSubstr("--rope-original-max: only yarn and llama3"));
  f = {};
  f.scaling = "none", f.factor = 2;
  EXPECT_THAT(error_of([&] { apply(q, f); }), HasSubstr("--rope-scaling none: --rope-factor"));
  f = {};
  f.scaling = "yarn", f.factor = 2, f.theta = 1;
  EXPECT_THAT(error_of([&] { apply(q, f); }), HasSubstr("m with the --rope-* flags: rope_theta 1 is invalid for yarn"));
  // Phi-3 takes LongRoPE only (transformers' Phi3Config); a LongRoPE takes no single factor
  ModelConfig phi = q;
  set_arch(phi, Arch::Phi3);
  phi.rope.type = "longrope", phi.rope.short_factor.assign(8, 1.0), phi.rope.long_factor.assign(8, 4.0);
  phi.rope.original_max_position_embeddings = 1024;
  phi = parse_config(config_to_json(phi), "phi");
  EXPECT_EQ(phi.rope.type, "longrope");
  for (const char* t : {"linear", "yarn", "llama3"}) {
    f = {};
    f.scaling = t, f.factor = 2;
    EXPECT_THAT(error_of([&] { apply(phi, f); }), HasSubstr(fmt::format("--rope-scaling {}: m takes RoPE scaling "
                                                                        "longrope only", t)));
  }
  f = {};
  f.factor = 2;
  EXPECT_THAT(error_of([&] { apply(phi, f); }), HasSubstr("--rope-factor: m's LongRoPE has a factor per frequency"));
  f = {};
  f.theta = 20000, f.max_positions = 8192;  // these apply: the attention scaling follows the new length
  float att = 0;
  rope_inv_freq(apply(phi, f), &att, 9000);
  EXPECT_NEAR(att, std::sqrt(1 + std::log(8.0) / std::log(1024.0)), 1e-6);
  f = {};
  f.scaling = "none";
  EXPECT_EQ(apply(phi, f).rope.type, "default");
  json linear_phi = config_to_json(phi);
  linear_phi["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(error_of([&] { parse_config(linear_phi, "lp.json"); }),
              HasSubstr("config lp.json: Phi3ForCausalLM takes rope_type default or longrope ('rope_scaling.rope_type' "
                        "= 'linear': transformers' Phi3Config refuses it)"));
  // the RoPE part of a config: another field is refused, naming it and where it came from
  EXPECT_THAT(error_of([&] { with_rope_json(q, {{"rope_theta", 5.0}, {"hidden_size", 8}}, "ad/oomb_rope.json"); }),
              HasSubstr("ad/oomb_rope.json: 'hidden_size' is not a RoPE field"));
}

// oomb train with the flags is oomb train of the edited model, bit for bit: the losses, and the
// saved model (its config's RoPE and its weights); the flags are what made the difference (the
// control: the model as it is). The banner says what changed.
TEST(RopeFlags, TrainingWithTheFlagsIsTrainingTheEditedModel) {
  Dirs t("_rope_train");
  const std::string d = t.d;
  CmdResult r = oomb_cmd(t.dir, t.train("m", fmt::format("{} --steps 3 --metrics {}/a.jsonl --out {}/oa", Dirs::kFlags,
                                                         d, d)));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("RoPE: rope_theta 10000, max_position_embeddings 4096 -> rope_theta 50000, yarn scaling "
                               "x4 from 4096 positions, max_position_embeddings 16384"));
  r = oomb_cmd(t.dir, t.train("e", fmt::format("--steps 3 --metrics {}/b.jsonl --out {}/ob", d, d)));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("RoPE:")));
  r = oomb_cmd(t.dir, t.train("m", fmt::format("--steps 3 --metrics {}/c.jsonl", d)));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<double> a = losses(t.dir / "a.jsonl"), b = losses(t.dir / "b.jsonl"), c = losses(t.dir / "c.jsonl");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], c[0]);
  EXPECT_EQ(rope_of(t.dir / "oa"), rope_of(t.dir / "ob"));
  EXPECT_EQ(rope_of(t.dir / "oa")["rope_scaling"]["original_max_position_embeddings"], 4096);  // pinned
  EXPECT_EQ(read_text(t.dir / "oa/model.safetensors"), read_text(t.dir / "ob/model.safetensors"));
  // the saved model trains on as the run did: no flags needed any more
  r = oomb_cmd(t.dir, fmt::format("train --model {0}/oa --data {0}/d.bin --seq-len 128 --chunk-size 32 --steps 1", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("RoPE:")));
}

// A checkpoint holds the run's RoPE: resuming without the flags is refused, naming the fields and
// the flags; with them (or the checkpoint's config.toml) it continues as the uninterrupted run.
TEST(RopeFlags, ACheckpointResumesWithTheFlags) {
  Dirs t("_rope_resume");
  const std::string d = t.d;
  CmdResult r = oomb_cmd(t.dir, t.train("m", fmt::format("{} --steps 3 --metrics {}/full.jsonl", Dirs::kFlags, d)));
  ASSERT_EQ(r.code, 0) << r.out;
  r = oomb_cmd(t.dir, t.train("m", fmt::format("{} --steps 3 --checkpoint-dir {}/ck --save-every 1", Dirs::kFlags, d)));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(read_text(t.dir / "ck/step-000001/config.toml"), HasSubstr("rope-theta"));
  r = oomb_cmd(t.dir, t.train("m", fmt::format("--steps 3 --resume {}/ck/step-000001", d)));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("differs from the checkpoint's in field 'rope_theta': 10000.0 here, 50000.0 in the "
                               "checkpoint (a RoPE field: --model's config.json, the --rope-* flags"));
  r = oomb_cmd(t.dir, t.train("m", fmt::format("{} --steps 3 --resume {}/ck/step-000001 --metrics {}/res.jsonl",
                                               Dirs::kFlags, d, d)));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<double> full = losses(t.dir / "full.jsonl"), res = losses(t.dir / "res.jsonl");
  ASSERT_EQ(full.size(), 3u);
  ASSERT_EQ(res.size(), 2u);  // steps 2 and 3
  EXPECT_EQ(res, std::vector<double>(full.begin() + 1, full.end()));
}

// A LoRA adapter records the RoPE it trained under (oomb_rope.json, beside PEFT's files); eval,
// generate and merge put it on the base: the same as the edited base with the adapter's PEFT files
// alone. Without the file (PEFT's adapter as it is) the base's RoPE applies: the control.
TEST(RopeFlags, ALoraAdapterCarriesItsRope) {
  Dirs t("_rope_lora");
  const std::string d = t.d;
  CmdResult r = oomb_cmd(t.dir, t.train("m", fmt::format("{} --steps 2 --lora-rank 4 --lora-alpha 64 --out {}/ad",
                                                         Dirs::kFlags, d)));
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(fs::exists(t.dir / "ad/oomb_rope.json"));
  EXPECT_EQ(json::parse(read_text(t.dir / "ad/oomb_rope.json")), rope_of(t.dir / "e") );
  fs::create_directories(t.dir / "peft");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    fs::copy_file(t.dir / "ad" / f, t.dir / "peft" / f);

  auto eval_loss = [&](const std::string& model, const std::string& lora, const std::string& extra, std::string* out) {
    const CmdResult e = oomb_cmd(t.dir, fmt::format("eval --model {0}/{1} --lora {0}/{2} --data {0}/d.bin --seq-len 128 "
                                                    "--chunk-size 32 --buckets 1 --windows 4 --json {3}",
                                                    d, model, lora, extra));
    EXPECT_EQ(e.code, 0) << e.out;
    if (out) *out = e.out;
    return json::parse(e.out.substr(e.out.find('{')))["loss"].get<double>();
  };
  std::string said;
  const double with_file = eval_loss("m", "ad", "", &said);
  EXPECT_THAT(said, HasSubstr("(the RoPE the adapter " + d + "/ad was trained under)"));
  EXPECT_EQ(with_file, eval_loss("e", "peft", "", nullptr));
  EXPECT_NE(with_file, eval_loss("m", "peft", "", nullptr));
  EXPECT_EQ(with_file, eval_loss("m", "peft", Dirs::kFlags, nullptr));  // the flags say the same
  EXPECT_NE(with_file, eval_loss("m", "ad", "--rope-theta 10000", nullptr));  // and override the file

  // sampled, so that every logit counts (greedy, this tiny model says the same whatever its RoPE)
  auto generated = [&](const std::string& model, const std::string& lora) {
    const CmdResult g = oomb_cmd(t.dir, fmt::format("generate --model {0}/{1} --lora {0}/{2} --prompt-ids "
                                                    "1,2,3,4,5,60,70,80,90,100,110,120 --max-new-tokens 48 "
                                                    "--temperature 1 --seed 3 --no-stop-at-eos", d, model, lora));
    EXPECT_EQ(g.code, 0) << g.out;
    return g.out.substr(g.out.find_last_of('\n', g.out.size() - 2) + 1);  // (the ids: the last line)
  };
  EXPECT_EQ(generated("m", "ad"), generated("e", "peft"));
  EXPECT_NE(generated("m", "ad"), generated("m", "peft"));  // the control

  r = oomb_cmd(t.dir, fmt::format("merge --model {0}/m --lora {0}/ad --out {0}/merged", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(rope_of(t.dir / "merged"), rope_of(t.dir / "e"));
  const CmdResult e = oomb_cmd(t.dir, fmt::format("eval --model {0}/merged --data {0}/d.bin --seq-len 128 --chunk-size 32 "
                                                  "--buckets 1 --windows 4 --json", d));
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NEAR(json::parse(e.out.substr(e.out.find('{')))["loss"].get<double>(), with_file, 1e-5 * with_file);
}

// Windows longer than the positions the model's RoPE is set for get a note, in train and eval
// (held-out loss and passkey); a scaling's reach is its length times its factor, whether the length
// is given or max_position_embeddings; a run on a RoPE the flags changed gets none (the user's choice).
TEST(RopeFlags, WindowsPastTheModelsPositionsAreNoted) {
  const ModelConfig short_q = edited(preset_config("tiny-qwen2"), [](json& j) { j["max_position_embeddings"] = 64; });
  EXPECT_THAT(cli::rope_reach_note(short_q, 128), HasSubstr("windows of 128 tokens reach past the 64 positions"));
  EXPECT_EQ(cli::rope_reach_note(short_q, 64), "");
  const ModelConfig yarn4 = edited(short_q, [](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  EXPECT_EQ(cli::rope_reach_note(yarn4, 256), "");
  EXPECT_THAT(cli::rope_reach_note(yarn4, 257), HasSubstr("past the 256 positions"));
  const ModelConfig linear4 = edited(short_q, [](json& j) { j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}}; });
  EXPECT_EQ(cli::rope_reach_note(linear4, 256), "");

  Dirs t("_rope_reach");
  const std::string d = t.d;
  fs::create_directories(t.dir / "s");
  fs::copy(t.dir / "m", t.dir / "s", fs::copy_options::recursive);
  write_bytes(t.dir / "s/config.json", config_to_json(edited(load_config(t.dir / "m"), [](json& j) {
                                         j["max_position_embeddings"] = 64;
                                       })).dump(2));
  CmdResult r = oomb_cmd(t.dir, t.train("s", "--steps 1"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("note: windows of 128 tokens reach past the 64 positions the model's RoPE is set for"));
  r = oomb_cmd(t.dir, t.train("s", "--steps 1 --rope-theta 20000"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("reach past")));
  r = oomb_cmd(t.dir, fmt::format("eval --model {0}/s --data {0}/d.bin --seq-len 128 --chunk-size 32 --buckets 1 "
                                  "--windows 1", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("windows of 128 tokens reach past the 64 positions"));
  r = oomb_cmd(t.dir, fmt::format("eval --model {0}/s --passkey --lengths 100 --depths 0.5 --trials 1", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("reach past the 64 positions"));
  r = oomb_cmd(t.dir, fmt::format("train --rope-theta 5 --steps 1"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--rope-* / --max-position-embeddings need --model and --data"));
}
