"""Creates an Ollama model from a safetensors directory through the API (e2e/ollama/build.sh).

Usage: create-from-files.py HOST:PORT DIR NAME. Uploads each file as a blob and calls
/api/create with the relative paths kept (the 0.17 CLI uploads by base name, which breaks the
sentence-transformers layout: config.json and 1_Pooling/config.json), quantized to Q8_0.
"""
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request

host, directory, name = sys.argv[1:4]
files = {}
for rel in ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "modules.json", "1_Pooling/config.json"]:
    with open(os.path.join(directory, rel), "rb") as f:
        data = f.read()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    url = f"http://{host}/api/blobs/{digest}"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"))
    except urllib.error.HTTPError:
        # Absent (404): upload. Posting a blob that exists resets the connection.
        urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST")).read()
    files[rel] = digest
body = {"model": name, "files": files, "quantize": "q8_0", "stream": False}
request = urllib.request.Request(f"http://{host}/api/create", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(request).read().decode())
