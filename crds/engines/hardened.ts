/**
 * Every model server container's security context, whatever its engine: Pod Security
 * "restricted" (no root, no privilege escalation, no capabilities) and a read-only image (writes
 * go to the volumes).
 */
export const HARDENED = {
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
  capabilities: { drop: ['ALL'] },
};
