import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../ollama/server.js';

/**
 * A throwaway PostgreSQL server from Debian's `postgresql` package: `initdb` in a temp dir,
 * `pg_ctl` on a free loopback port (its socket in the same dir), trust auth for the local
 * superuser, durability off (tests do not survive power cuts, and fsync dominates small
 * writes). As root (CI), it runs as `nobody`: PostgreSQL refuses to run as root.
 */

export interface Postgres {
  url: string;
  port: number;
  /** Fast shutdown (what a restart or failover looks like to clients). */
  stop(): Promise<void>;
  /** Starts it again on its data; on `port` when given (another server's address: a failover). */
  start(port?: number): Promise<void>;
  /** Stops it and deletes its data. */
  destroy(): Promise<void>;
  /** Runs SQL as the superuser through psql (setup and fault injection), in `database` (default postgres). */
  psql(sql: string, database?: string): string;
  /** The postmaster's pid (its backends are its children): benchmarks sample their CPU. */
  pid(): number;
}

const NOBODY = 65534;

/** The directory holding initdb and pg_ctl: the newest installed major version. */
export function postgresBin(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  const v = versions[0];
  if (!v) throw new Error("PostgreSQL is not installed: apt-get install postgresql (the tests run Debian's package)");
  return join(root, v, 'bin');
}

export async function startPostgres(): Promise<Postgres> {
  const bin = postgresBin();
  const dir = mkdtempSync(join(tmpdir(), 'pao-pg-'));
  chmodSync(dir, 0o755);
  const data = join(dir, 'data');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) execFileSync('chown', [`${NOBODY}:${NOBODY}`, dir]);
  const run = (cmd: string, args: string[]) => {
    const [file, argv] = asRoot
      ? ['setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', join(bin, cmd), ...args]]
      : [join(bin, cmd), args];
    const res = spawnSync(file, argv, { encoding: 'utf8', cwd: dir, timeout: 60_000 });
    if (res.status !== 0) throw new Error(`${cmd} failed: ${res.stderr || res.stdout}`);
    return res.stdout;
  };
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C']);
  const options = (port: number) =>
    [
      `-p ${port}`,
      `-k ${dir}`,
      "-c listen_addresses='127.0.0.1'",
      '-c fsync=off',
      '-c synchronous_commit=off',
      '-c full_page_writes=off',
      '-c max_connections=200',
    ].join(' ');
  const pg: Postgres = {
    url: '',
    port: await freePort(),
    start: async (port?: number) => {
      if (port !== undefined) pg.port = port;
      pg.url = `postgres://postgres@127.0.0.1:${pg.port}/postgres`;
      run('pg_ctl', ['-D', data, '-o', options(pg.port), '-l', join(dir, 'server.log'), '-w', '-t', '30', 'start']);
    },
    stop: async () => {
      run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
    },
    destroy: async () => {
      spawnSync(asRoot ? 'setpriv' : join(bin, 'pg_ctl'), [
        ...(asRoot ? [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', join(bin, 'pg_ctl')] : []),
        '-D',
        data,
        '-m',
        'immediate',
        '-w',
        'stop',
      ]);
      rmSync(dir, { recursive: true, force: true });
    },
    pid: () => Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]),
    psql: (sql: string, database = 'postgres') =>
      execFileSync(
        join(bin, 'psql'),
        ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', pg.url.replace(/\/postgres$/, `/${database}`), '-c', sql],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
      ),
  };
  await pg.start();
  return pg;
}
