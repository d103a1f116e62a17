import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Express } from 'express';
import type { IdentityRouter } from '../../src/index.js';

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

/** The router's host middlewares on a host app: `GET /whoami` behind authenticate(), `GET /org` behind requirePermission('org.read'); each answers `{data: caller}`. */
export function callerHostApp(identity: IdentityRouter): Promise<ListeningApp> {
  const app = express();
  app.get('/whoami', identity.authenticate(), (req, res) => void res.json({ data: identity.caller(req) }));
  app.get('/org', identity.requirePermission('org.read'), (req, res) => void res.json({ data: identity.caller(req) }));
  return listening(app);
}
