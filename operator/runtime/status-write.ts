import { isDeepStrictEqual } from 'node:util';
import { API_GROUP, API_VERSION } from '../../crds/constants.js';
import { type KubeClient, resourcePath } from '../../crds/kube/kube-client.js';

/**
 * Writes a resource's status subresource only when it changed. The server's JSON orders keys
 * differently from ours, so values are compared, after dropping undefined fields. A merge
 * patch replaces lists whole, so the conditions list is written as computed; fields another
 * writer owns are left out of the patch, which leaves them as they are.
 */
export async function writeStatusIfChanged(
  client: KubeClient,
  plural: string,
  obj: { metadata: { namespace?: string; name?: string }; status?: object },
  status: object,
  /** Fields compared but not written: another writer owns them (the proxies' status.usage). */
  theirs: string[] = [],
): Promise<boolean> {
  const next = JSON.parse(JSON.stringify(status)) as Record<string, unknown>;
  if (isDeepStrictEqual(obj.status ?? {}, next)) return false;
  for (const field of theirs) delete next[field];
  await client.mergePatch(
    resourcePath({
      group: API_GROUP,
      version: API_VERSION,
      plural,
      namespace: obj.metadata.namespace ?? '',
      name: obj.metadata.name ?? '',
      subresource: 'status',
    }),
    { status: next },
  );
  return true;
}
