/**
 * What Express's dispatch inside a mounted Router costs a request, with no network and no
 * other work to hide it:
 *
 *   npx tsx bench/mounted-dispatch.ts [rounds]
 *
 * Two apps mount a Router at /identity whose only work is to answer. One answers from a layer
 * of the Router's stack, as the router's routes were answered before; the other from the
 * Router's own `handle`, as they are now (src/http/build-router.ts). Each is called through
 * `app.handle` with Node's own request and response objects, 100,000 times a round, the two in
 * turn, and the median time a request of each is printed with their difference.
 */
import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import { median } from './process-cpu.js';

const ROUNDS = Number(process.argv[2] ?? 9);
const REQUESTS = 100_000;

const answer = (_req: Request, res: Response): void => {
  res.statusCode = 200;
  res.setHeader('Cache-Control', 'no-store');
  res.end('{}');
};

function mountedApp(router: Router): express.Express {
  const app = express();
  app.use('/identity', router);
  return app;
}

const throughStack = express.Router();
throughStack.use(answer);

const throughHandle = express.Router() as Router & { handle(req: Request, res: Response, done: NextFunction): void };
throughHandle.handle = (req, res) => answer(req, res);

const apps = { 'a layer of the stack': mountedApp(throughStack), "the Router's handle": mountedApp(throughHandle) };
const socket = new Socket();

/** Nanoseconds a request, over REQUESTS requests. */
function timed(app: express.Express): number {
  const started = process.hrtime.bigint();
  for (let index = 0; index < REQUESTS; index++) {
    const req = new IncomingMessage(socket);
    req.method = 'GET';
    req.url = '/identity/orgs';
    const res = new ServerResponse(req);
    (app as unknown as { handle(req: IncomingMessage, res: ServerResponse, done: (error?: unknown) => void): void }).handle(req, res, (error) => {
      throw error ?? new Error('not answered');
    });
  }
  return Number(process.hrtime.bigint() - started) / REQUESTS;
}

const times: Record<string, number[]> = Object.fromEntries(Object.keys(apps).map((name) => [name, []]));
for (const app of Object.values(apps)) timed(app);
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? Object.entries(apps) : Object.entries(apps).reverse();
  for (const [name, app] of order) times[name]!.push(timed(app));
}
for (const [name, values] of Object.entries(times)) {
  console.log(`${name}: median ${(median(values) / 1000).toFixed(2)} µs a request (${values.map((value) => (value / 1000).toFixed(2)).join(', ')})`);
}
const [stack, handle] = Object.values(times).map(median) as [number, number];
console.log(`the Router's dispatch: ${((stack - handle) / 1000).toFixed(2)} µs a request`);
