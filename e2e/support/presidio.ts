import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';

/**
 * A real Presidio analyzer (the presidio-analyzer package's AnalyzerEngine behind its REST API,
 * e2e/python/presidio_server.py) on a free loopback port, from the venv e2e/python/presidio-venv.sh
 * caches; stopped with the test.
 */
export interface RunningPresidio {
  url: string;
  stop(): Promise<void>;
}

const HERE = import.meta.dirname;

export async function startPresidio(): Promise<RunningPresidio> {
  const out = execFileSync('bash', [join(HERE, '..', 'python', 'presidio-venv.sh')], { encoding: 'utf8' });
  const python = out.trim().split('\n').pop() ?? '';
  const child = spawn(
    python,
    [join(HERE, '..', 'python', 'presidio_server.py'), join(python, '..', '..', 'blank_en')],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    let said = '';
    const timer = setTimeout(
      () => reject(new Error(`the Presidio analyzer did not start: ${said.slice(-2000)}`)),
      60_000,
    );
    const read = (chunk: Buffer) => {
      said += chunk.toString('utf8');
      const m = /listening (\d+)/.exec(said);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout?.on('data', read);
    child.stderr?.on('data', (c: Buffer) => {
      said += c.toString('utf8');
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the Presidio analyzer exited (${code}): ${said.slice(-2000)}`));
    });
  });
  // Its log is not read once it serves; drained so a full pipe never stalls it.
  child.stdout?.resume();
  child.stderr?.resume();
  return { url: `http://127.0.0.1:${port}`, stop: () => stopped(child) };
}

function stopped(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
