import type { KubeClient, KubeObject } from '../../crds/kube/kube-client.js';

/** Records Kubernetes Events (core/v1) about an object, as `kubectl describe` shows them. */
export class EventRecorder {
  constructor(
    private readonly client: KubeClient,
    private readonly component: string,
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  async record(obj: KubeObject, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
    const namespace = obj.metadata?.namespace ?? 'default';
    const now = new Date().toISOString();
    try {
      await this.client.create(`/api/v1/namespaces/${encodeURIComponent(namespace)}/events`, {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { generateName: `${obj.metadata?.name}.`, namespace },
        involvedObject: {
          apiVersion: obj.apiVersion,
          kind: obj.kind,
          name: obj.metadata?.name,
          namespace: obj.metadata?.namespace,
          uid: obj.metadata?.uid,
          resourceVersion: obj.metadata?.resourceVersion,
        },
        type,
        reason,
        // Event messages are capped at 1 KiB by the API server.
        message: message.slice(0, 1024),
        source: { component: this.component },
        reportingComponent: this.component,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      });
    } catch (err) {
      // An event is best effort: losing one must never fail a reconcile.
      this.onError(err);
    }
  }
}
