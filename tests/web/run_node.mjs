// Runs tiny transformers.js folders in Node: node run_node.mjs JOB.json OUT.json
// JOB: {"transformers": ".../transformers.node.mjs", "root": localModelPath,
//       "runs": [{"name", "kind": classify|generate|text2text|image|raw|speech2text|image2text,
//                 "dtypes": [...], "folder"? (default: name), "class"? (a transformers.js
//                 class name instead of the kind's Auto class),
//                 "text"? (or "input_ids"?: [...], no tokenizer), "pixel_values"?: {"dims",
//                 "data"}, "feeds"?: {name: {"type", "dims", "data"}} (raw: AutoModel, every
//                 output returned), "max_new_tokens"?}]}
// OUT: {name: {dtype: {"input_ids", "logits": {"dims", "data"}, "tokens"?} | {"error"}}}
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const tjs = await import(pathToFileURL(job.transformers).href);
const { env, Tensor, AutoTokenizer, AutoModel, AutoModelForSequenceClassification,
        AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForImageClassification,
        AutoModelForSpeechSeq2Seq, AutoModelForVision2Seq } = tjs;
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = job.root;

const plain = (t) => ({ dims: t.dims, data: Array.from(t.data, Number) });
const ids = (t) => Array.from(t.data, Number);
const classes = { classify: AutoModelForSequenceClassification, generate: AutoModelForCausalLM,
                  text2text: AutoModelForSeq2SeqLM, image: AutoModelForImageClassification,
                  raw: AutoModel, speech2text: AutoModelForSpeechSeq2Seq,
                  image2text: AutoModelForVision2Seq };
const tensor = (f) => new Tensor(f.type, f.type === "int64" ? BigInt64Array.from(f.data.map(BigInt))
                                 : f.type === "bool" ? Uint8Array.from(f.data)
                                 : Float32Array.from(f.data), f.dims);
const tokens = (list) => new Tensor("int64", BigInt64Array.from(list.map(BigInt)), [1, list.length]);

const results = {};
for (const run of job.runs) {
  results[run.name] = {};
  for (const dtype of run.dtypes) {
    try {
      const cls = run.class ? tjs[run.class] : classes[run.kind];
      const model = await cls.from_pretrained(run.folder ?? run.name, { dtype });
      const got = {};
      if (run.kind === "image2text") {  // the first decoder step's logits, then generate()
        const pixel_values = tensor(run.feeds.pixel_values);
        const start = BigInt(model.config.decoder_start_token_id);
        const out = await model({ pixel_values,
                                  decoder_input_ids: new Tensor("int64", BigInt64Array.from([start]), [1, 1]) });
        got.logits = plain(out.logits);
        const seq = await model.generate({ pixel_values, max_new_tokens: run.max_new_tokens ?? 8,
                                           do_sample: false });
        got.tokens = ids(seq);
      } else if (run.kind === "speech2text") {  // the first decoder step's logits, then generate()
        const input_features = tensor(run.feeds.input_features);
        const start = BigInt(model.config.decoder_start_token_id);
        const out = await model({ input_features,
                                  decoder_input_ids: new Tensor("int64", BigInt64Array.from([start]), [1, 1]) });
        got.logits = plain(out.logits);
        const seq = await model.generate({ input_features, max_new_tokens: run.max_new_tokens ?? 8,
                                           do_sample: false });
        got.tokens = ids(seq);
      } else if (run.kind === "raw") {
        const feeds = Object.fromEntries(Object.entries(run.feeds).map(([k, f]) => [k, tensor(f)]));
        const out = await model(feeds);
        got.outputs = {};
        for (const [k, v] of Object.entries(out)) if (v instanceof Tensor) got.outputs[k] = plain(v);
      } else if (run.kind === "image") {
        const pv = run.pixel_values;
        const out = await model({ pixel_values: new Tensor("float32", Float32Array.from(pv.data), pv.dims) });
        got.logits = plain(out.logits);
      } else {
        let inputs;
        if (run.input_ids) {
          inputs = { input_ids: tokens(run.input_ids),
                     attention_mask: tokens(run.input_ids.map(() => 1)) };
        } else {
          const tokenizer = await AutoTokenizer.from_pretrained(run.folder ?? run.name);
          inputs = tokenizer(run.text);
        }
        got.input_ids = ids(inputs.input_ids);
        let feeds = inputs;
        if (run.kind === "text2text") {
          const start = BigInt(model.config.decoder_start_token_id);
          feeds = { ...inputs, decoder_input_ids: new Tensor("int64", BigInt64Array.from([start]), [1, 1]) };
        }
        const out = await model(feeds);
        got.logits = plain(out.logits);
        if (run.kind !== "classify") {
          const seq = await model.generate({ ...inputs, max_new_tokens: run.max_new_tokens ?? 8,
                                             do_sample: false });
          got.tokens = ids(seq);
        }
      }
      await model.dispose();
      results[run.name][dtype] = got;
    } catch (e) {
      results[run.name][dtype] = { error: String(e && e.stack || e).slice(0, 2000) };
    }
  }
}
writeFileSync(process.argv[3], JSON.stringify(results));
