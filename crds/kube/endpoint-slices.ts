/**
 * EndpointSlices (discovery.k8s.io/v1) as base URLs: the proxy balances over a model Service's
 * ready pods, the operator's autoscaler reads every proxy replica. Only the fields both read.
 */

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

export interface EndpointSlice {
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string>; resourceVersion?: string };
  addressType?: string;
  endpoints?: Array<{ addresses?: string[]; conditions?: { ready?: boolean; terminating?: boolean } }>;
  ports?: Array<{ name?: string; port?: number }> | null;
}

/**
 * `http://<address>:<port>` of each ready endpoint of a slice, on the port of that name. A ready
 * condition left unset means ready (the API's rule); FQDN slices are not pod addresses.
 */
export function readyUrls(slice: EndpointSlice, portName: string): string[] {
  const port = slice.ports?.find((p) => p.name === portName)?.port;
  if (!port || (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6')) return [];
  const urls: string[] = [];
  for (const e of slice.endpoints ?? []) {
    if (e.conditions?.ready === false) continue;
    const ip = e.addresses?.[0];
    if (ip) urls.push(`http://${slice.addressType === 'IPv6' ? `[${ip}]` : ip}:${port}`);
  }
  return urls;
}
