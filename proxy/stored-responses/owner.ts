import type { Caller } from '../access/auth.js';
import type { StoredRow } from './rows.js';

/** Who owns what a caller stores: its team, or its key alone where the key has no team. */
export const ownerOf = (caller: Caller): string =>
  caller.policy.team ? `team:${caller.policy.team}` : `key:${caller.keyHashPrefix}`;

/** Whether the caller may read a row: its owner's, or any for an admin. */
export const mayRead = (caller: Caller, row: StoredRow): boolean =>
  caller.policy.role === 'Admin' || row.owner === ownerOf(caller);
