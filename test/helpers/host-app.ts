import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Express } from 'express';

/** A host app listening on 127.0.0.1: its origin (`http://127.0.0.1:<port>`) and how to stop it. */
export interface ListeningApp {
  base: string;
  server: Server;
  close(): Promise<void>;
}

/** Listens on a free port of 127.0.0.1, as a host serving the router's middleware or mount would. */
export async function listening(app: Express): Promise<ListeningApp> {
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
