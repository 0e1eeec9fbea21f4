import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OLLAMA_MODEL, startOllama } from './ollama/server.js';
import { standaloneFiles, startProxyProcess } from './proxy-process.js';
const ollama = await startOllama({ parallel: 1 });
const dir = mkdtempSync(join(tmpdir(), 'try-'));
const proxy = await startProxyProcess([...standaloneFiles(dir, [`apiVersion: ai.platform/v1beta1
kind: ModelDeployment
metadata: { name: smollm2 }
spec: { model: "${OLLAMA_MODEL}", serviceName: smollm2, endpoint: "${ollama.url}" }
`], 'sk-try\n'), '--usage-db', join(dir, 'u.db')]);
console.log(JSON.stringify({ ollama: ollama.url, proxy: proxy.base, dir }));
await new Promise((r) => setTimeout(r, 3_600_000));
