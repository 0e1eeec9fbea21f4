import type { ServerResponse } from 'node:http';
import type { CallStream } from './call-stream.js';
import type { RpcAnswer, RpcNotification, RpcRequest } from './json-rpc.js';

/**
 * How one POST is answered: JSON by default, switching to an SSE stream the moment the server
 * sends something on the way (progress, a log line) and the client accepts text/event-stream,
 * so a quick call costs no stream and a long one reports as it goes. Counts the bytes it sends
 * (a tool call's record says how much went out). Given `resumable`, a stream's events carry ids
 * and outlive the connection (proxy/mcp/call-stream.ts).
 */

export class AnswerWriter {
  private streaming = false;
  private stream: CallStream | undefined;
  bytes = 0;

  constructor(
    /** The POST's response: written here, or (a retry another replica takes up) passed on whole. */
    readonly response: ServerResponse,
    private readonly headers: Record<string, string>,
    private readonly acceptsStream: boolean,
    private readonly resumable?: (res: ServerResponse) => CallStream | undefined,
  ) {}

  /**
   * The client's connection broke before the answer: `cancel` at once, or, for a stream it can
   * resume, once it has not come back in time.
   */
  whenGone(cancel: () => void): void {
    this.response.once('close', () => {
      if (this.response.writableFinished) return;
      if (this.stream) this.stream.onAbandon(cancel);
      else cancel();
    });
  }

  get isStream(): boolean {
    return this.streaming;
  }

  /** A notification on the way; the stream begins with the first (an answer alone stays JSON). */
  notification(n: RpcNotification): void {
    this.message(n);
  }

  /** A request of a server's, relayed to the client on this call's stream. */
  request(r: RpcRequest): void {
    this.message(r);
  }

  /** Whether messages on the way can reach the client (it reads event streams, and this one is open). */
  get canStream(): boolean {
    return (
      this.stream !== undefined || (this.acceptsStream && !this.response.writableEnded && !this.response.destroyed)
    );
  }

  private message(n: RpcNotification | RpcRequest): void {
    // A resumable stream takes events after its connection broke too; a plain one only while open.
    if (!this.stream) {
      if (!this.acceptsStream || this.response.writableEnded || this.response.destroyed) return;
      if (!this.streaming) this.begin();
    }
    this.emit(JSON.stringify(n));
  }

  /** The answer becomes a stream: its head written, its events resumable where they may be. */
  private begin(): void {
    this.streaming = true;
    this.response.writeHead(200, {
      ...this.headers,
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    this.stream = this.resumable?.(this.response);
  }

  private emit(data: string): void {
    if (this.stream) this.bytes += this.stream.write(data);
    else this.event(data);
  }

  answer(a: RpcAnswer, status = 200): void {
    const text = JSON.stringify(a);
    if (this.stream) {
      this.emit(text);
      this.stream.end();
      return;
    }
    if (this.response.writableEnded || this.response.destroyed) return;
    if (this.streaming) {
      this.event(text);
      this.response.end();
      return;
    }
    this.bytes += Buffer.byteLength(text);
    this.response.writeHead(status, { ...this.headers, 'content-type': 'application/json' }).end(text);
  }

  /** The answer to a notification or a response: accepted, no body. */
  accepted(): void {
    this.response.writeHead(202, this.headers).end();
  }

  private event(data: string): void {
    const chunk = `event: message\ndata: ${data}\n\n`;
    this.bytes += Buffer.byteLength(chunk);
    this.response.write(chunk);
  }
}

/** Whether an Accept header admits an SSE answer. */
export const acceptsEventStream = (accept: string | undefined): boolean =>
  accept !== undefined && /(^|,)\s*(text\/event-stream|text\/\*|\*\/\*)\s*(;|,|$)/i.test(accept);
