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
