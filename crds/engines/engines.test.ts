import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { engineFailure } from './engine.js';
import { ollama } from './ollama.js';
import { ENGINES, parseEngineImages } from './table.js';
import { boundOutput, vllm } from './vllm.js';

interface Rule {
  rule: string;
  message: string;
}
const crd = yaml.load(readFileSync(new URL('../ai.platform_modeldeployments.yaml', import.meta.url), 'utf8')) as {
  spec: {
    versions: Array<{
      schema: {
        openAPIV3Schema: {
          properties: {
            spec: { 'x-kubernetes-validations': Rule[]; properties: { engine: { enum: string[]; default: string } } };
          };
        };
      };
    }>;
  };
};
const spec = crd.spec.versions[0]?.schema.openAPIV3Schema.properties.spec;

describe('the engine table', () => {
  it('has a module for each value of the CRD enum, Ollama the default', () => {
    expect(Object.keys(ENGINES).sort()).toEqual([...(spec?.properties.engine.enum ?? [])].sort());
    expect(spec?.properties.engine.default).toBe('Ollama');
    for (const [name, engine] of Object.entries(ENGINES)) expect(engine.name).toBe(name);
  });

  it("has each engine's model form in one CEL rule of the CRD, the same pattern as its module's", () => {
    for (const engine of Object.values(ENGINES)) {
      const rule = spec?.['x-kubernetes-validations'].find((r) =>
        r.rule.startsWith(`self.engine != '${engine.name}' || self.model.matches(`),
      );
      const cel = rule?.rule.match(/matches\('(.*)'\)$/)?.[1];
      expect(new RegExp(cel ?? '(none)').source, engine.name).toBe(engine.modelForm.pattern.source);
      expect(engine.modelForm.pattern.test(engine.modelForm.example)).toBe(true);
      expect(engine.modelForm.pattern.test(engine.modelForm.rejected)).toBe(false);
      expect(rule?.message).toContain(engine.modelForm.describe);
    }
  });

  it('reads --engine-images, the older --ollama-image under it, and refuses an unknown engine', () => {
    expect(parseEngineImages('VLLM=r.example/vllm:1, Ollama=r.example/ollama:2,', 'old/ollama:1')).toEqual({
      VLLM: 'r.example/vllm:1',
      Ollama: 'r.example/ollama:2',
    });
    expect(parseEngineImages('', 'old/ollama:1')).toEqual({ Ollama: 'old/ollama:1' });
    expect(() => parseEngineImages('SGLang=x')).toThrow(/unknown engine "SGLang"; engines: Ollama, VLLM/);
    expect(() => parseEngineImages('VLLM')).toThrow(/not ENGINE=IMAGE/);
  });
});

describe("the engines' failure reasons", () => {
  it.each([
    [
      vllm,
      'ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`',
      'ModelTooLarge',
    ],
    [vllm, 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', 'ModelTooLarge'],
    [
      vllm,
      'ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5.',
      'GPUUnsupported',
    ],
    [
      vllm,
      "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0'",
      'ModelWeightsMissing',
    ],
    [vllm, "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.", 'ModelNotSupported'],
    [ollama, 'Error: model requires more system memory (9.2 GiB) than is available (4.0 GiB)', 'ModelTooLarge'],
    [ollama, 'CUDA error: no kernel image is available for execution on the device', 'GPUUnsupported'],
  ] as const)('%#: maps what the engine said to the Ready reason with a fix', (engine, words, reason) => {
    const hit = engineFailure(engine, 'm/M', `INFO starting\n${words}\n`);
    expect(hit?.reason).toBe(reason);
    expect(hit?.message).toMatch(/: /);
    expect(hit?.message).toContain('m/M');
  });

  it('names nothing for words it does not know', () => {
    expect(engineFailure(vllm, 'm', 'Traceback: KeyError: x')).toBeUndefined();
  });
});

describe("vLLM's output limit", () => {
  const bound = boundOutput(['max_tokens', 'max_completion_tokens']);
  it('is lowered to the context the server runs with, where vLLM would refuse it', () => {
    expect(bound({ max_tokens: 32_000, max_completion_tokens: 100, x: 1 }, { contextLength: 8192 })).toEqual({
      max_tokens: 8192,
      max_completion_tokens: 100,
      x: 1,
    });
  });
  it('passes a body within the context, or where the context is unknown, as it came (no copy)', () => {
    const body = { max_tokens: 100 };
    expect(bound(body, { contextLength: 8192 })).toBe(body);
    const big = { max_tokens: 99_999 };
    expect(bound(big, {})).toBe(big);
  });
});
