import type pg from 'pg';

/**
 * A table of the usage store's PostgreSQL database made when first used: the DDL runs in one
 * transaction under an advisory lock (replicas starting together make it once), and a failure
 * (the database unreachable) is forgotten so that the next use tries again. The stored Responses'
 * and the audit trail's tables are made this way beside the usage store's own migrations.
 */
export function schemaOnce(pool: pg.Pool, lock: number, schema: string): () => Promise<void> {
  let made: Promise<void> | undefined;
  return () => {
    made ??= (async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SELECT pg_advisory_xact_lock($1)', [lock]);
        await client.query(schema);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        client.release();
      }
    })().catch((err: unknown) => {
      made = undefined;
      throw err;
    });
    return made;
  };
}
