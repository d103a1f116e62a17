import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request a receiver saw, as it arrived. */
export interface ReceivedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** What the receiver answers: a status (and headers), decided per request. */
export type Responder = (request: ReceivedRequest, index: number) => { status: number; headers?: Record<string, string> };

/**
 * A real webhook endpoint on 127.0.0.1 for the tests. It records every request and every TCP
 * connection, so an SSRF test can prove that a refused URL reached nothing.
 */
export class WebhookReceiver {
  readonly requests: ReceivedRequest[] = [];
  connections = 0;
  responder: Responder = () => ({ status: 200 });
  private server!: http.Server;

  static async start(responder?: Responder): Promise<WebhookReceiver> {
    const receiver = new WebhookReceiver();
    if (responder) receiver.responder = responder;
    receiver.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const request: ReceivedRequest = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
        receiver.requests.push(request);
        const answer = receiver.responder(request, receiver.requests.length - 1);
        res.writeHead(answer.status, answer.headers);
        res.end('a body the router must never store');
      });
    });
    receiver.server.on('connection', () => {
      receiver.connections += 1;
    });
    await new Promise<void>((resolve) => receiver.server.listen(0, '127.0.0.1', resolve));
    return receiver;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  url(path = '/hook'): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  /** Requests carrying one `webhook-id`. */
  withId(id: string): ReceivedRequest[] {
    return this.requests.filter((request) => request.headers['webhook-id'] === id);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
