import { type BedrockPriceTable, mergePrices, parseBedrockPrices } from '../../crds/catalog/prices.js';
import { AGENT_NAMESPACE, PRICES_CONFIGMAP, PRICES_KEY } from '../../crds/constants.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';

/**
 * The price table as the proxies price with: the shipped one with the prices ConfigMap over it
 * (prices, and the lifecycle dates beside them); the shipped one alone when the ConfigMap is
 * absent, unreadable or malformed (the proxies keep their last good one instead, so for as long as
 * the ConfigMap is malformed the two may differ on the entries it overrides).
 */
export async function priceTableIn(client: KubeClient, shipped: BedrockPriceTable): Promise<BedrockPriceTable> {
  try {
    const cm = await client.get<{ data?: Record<string, string> }>(
      `/api/v1/namespaces/${AGENT_NAMESPACE}/configmaps/${PRICES_CONFIGMAP}`,
    );
    const text = cm?.data?.[PRICES_KEY];
    return text ? mergePrices(shipped, parseBedrockPrices(text)) : shipped;
  } catch {
    return shipped;
  }
}
