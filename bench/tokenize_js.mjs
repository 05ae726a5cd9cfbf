// The JavaScript reference for bench/tokenizer_speed.sh: transformers.js (@lenml/tokenizers)
// encoding one text file with a tokenizer.json. Prints the encode seconds (best of --repeat),
// the load seconds, and writes the ids as raw uint32 for comparison.
//   node bench/tokenize_js.mjs TOKENIZER_JSON INPUT OUT.bin [--repeat K]
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../tools/package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const [tj, input, out] = process.argv.slice(2);
const k = process.argv.indexOf("--repeat");
const repeat = k > 0 ? Number(process.argv[k + 1]) : 3;
const t0 = performance.now();
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tj, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(path.dirname(tj), "tokenizer_config.json"), "utf8")),
});
const load = (performance.now() - t0) / 1000;
const text = fs.readFileSync(input, "utf8");
let ids;
const times = [];
for (let r = 0; r < repeat; ++r) {
  const t = performance.now();
  ids = tok.encode(text, { add_special_tokens: false });
  times.push((performance.now() - t) / 1000);
}
times.sort((a, b) => a - b);
const best = times[Math.floor(times.length / 2)];
fs.writeFileSync(out, Buffer.from(new Uint32Array(ids).buffer));
console.log(JSON.stringify({ encode_s: best, min_s: times[0], max_s: times[times.length - 1], load_s: load,
                             tokens: ids.length, bytes: Buffer.byteLength(text) }));
