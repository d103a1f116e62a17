/**
 * A stand-in for your DNS host while the example runs (development only): the router's
 * `adapters.dns.resolveTxt` reads TXT records from this in-memory table, and the "Single
 * sign-on" page publishes the record a domain asks for through `/dev/dns`, so a newcomer can
 * verify a domain without owning one. Name resolution (`lookup`) stays the system's.
 * In production the router asks real DNS (`node:dns/promises`), and this table does not exist.
 */
import express, { type Router } from 'express';
import type { DnsResolver } from '../../src/index.js';

const MAX_RECORDS = 200;
const MAX_VALUE_LENGTH = 255;

export interface DevDns {
  /** Passed to the router as `adapters.dns`. */
  readonly adapter: DnsResolver;
  router(): Router;
}

export function createDevDns(): DevDns {
  const records = new Map<string, string[]>();
  return {
    adapter: {
      resolveTxt: async (name) => {
        const values = records.get(name.toLowerCase());
        if (!values) throw Object.assign(new Error(`queryTxt ENOTFOUND ${name}`), { code: 'ENOTFOUND' });
        // One chunk per record, as a DNS answer of short values arrives.
        return values.map((value) => [value]);
      },
    },
    router() {
      const router = express.Router();
      router.get('/dev/dns.json', (_req, res) => {
        res.json({ data: { records: [...records].map(([name, values]) => ({ name, values })) } });
      });
      // Publishes one TXT value at a name, as you would at your DNS host.
      router.post('/dev/dns/txt', express.json({ limit: '4kb' }), (req, res) => {
        const name = typeof req.body?.name === 'string' ? req.body.name.trim().toLowerCase() : '';
        const value = typeof req.body?.value === 'string' ? req.body.value : '';
        if (!/^[a-z0-9_.-]{1,253}$/.test(name) || value.length === 0 || value.length > MAX_VALUE_LENGTH) {
          res.status(422).json({ errors: ['name must be a DNS name and value a TXT value of at most 255 characters'] });
          return;
        }
        if (!records.has(name) && records.size >= MAX_RECORDS) {
          res.status(422).json({ errors: ['the stand-in holds enough records already'] });
          return;
        }
        const values = records.get(name) ?? [];
        if (!values.includes(value)) values.push(value);
        records.set(name, values);
        res.status(201).json({ data: { name, values } });
      });
      return router;
    },
  };
}
