import http from 'node:http';

export interface RawResponse {
  status: number;
  body: any;
  text: string;
  headers: http.IncomingHttpHeaders;
}

/** A GET through node:http, so a test can send a header line twice (fetch would join them into one). */
export function rawRequest(url: string, headers: Record<string, string | string[]>): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { headers }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        resolve({ status: response.statusCode ?? 0, body, text, headers: response.headers });
      });
    });
    request.on('error', reject);
    request.end();
  });
}

/**
 * Any request through node:http: the path sent as given after `baseUrl`'s (a URL would normalise
 * it), the headers exactly as given, and an optional body (a GET may carry one).
 */
export function rawHttp(baseUrl: string, method: string, path: string, headers: Record<string, string | string[]>, body?: string | Buffer): Promise<RawResponse> {
  const { hostname, port, pathname } = new URL(baseUrl);
  const sent = body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) };
  return new Promise((resolve, reject) => {
    const request = http.request({ hostname, port, path: pathname + path, method, headers: sent }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
        resolve({ status: response.statusCode ?? 0, body: parsed, text, headers: response.headers });
      });
    });
    request.on('error', reject);
    request.end(body);
  });
}
