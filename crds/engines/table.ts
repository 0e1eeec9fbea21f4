import type { EngineModule, EngineName } from './engine.js';
import { ollama } from './ollama.js';
import { vllm } from './vllm.js';

/** Every engine's module, by spec.engine (the CRD's enum; crds/engines/engines.test.ts checks they agree). */
export const ENGINES: Readonly<Record<EngineName, EngineModule>> = {
  Ollama: ollama,
  VLLM: vllm,
};

/** The engine a ModelDeployment's spec names; absent: Ollama (the schema's default). */
export const engineFor = (spec: { engine?: EngineName }): EngineModule => ENGINES[spec.engine ?? 'Ollama'];

/**
 * The operator's --engine-images ("Ollama=ollama/ollama:0.17.4,VLLM=vllm/vllm-openai:v0.32.0"),
 * and --ollama-image, the older flag for Ollama's; throws on an engine nobody knows, so a typo
 * stops the operator rather than deploying the default.
 */
export function parseEngineImages(text: string, ollamaImage = ''): Partial<Record<EngineName, string>> {
  const images: Partial<Record<EngineName, string>> = ollamaImage ? { Ollama: ollamaImage } : {};
  for (const pair of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const at = pair.indexOf('=');
    const name = pair.slice(0, at).trim();
    const image = pair.slice(at + 1).trim();
    if (at <= 0 || !image) throw new Error(`--engine-images: "${pair}" is not ENGINE=IMAGE`);
    if (!(name in ENGINES)) {
      throw new Error(`--engine-images: unknown engine "${name}"; engines: ${Object.keys(ENGINES).join(', ')}`);
    }
    images[name as EngineName] = image;
  }
  return images;
}
