import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AccessCache, scopesOfEvent, type InvalidationCarrier } from '../../src/services/shared/access-cache.js';

// Issue 11: the rules of the access cache itself, without a database.

function counter() {
  let loads = 0;
  return { load: async () => ++loads, get loads() { return loads; } };
}

test('an entry is served until a scope it depends on is invalidated', async () => {
  const cache = new AccessCache({ ttlMs: 60_000, maxEntries: 100 });
  const source = counter();
  const read = () => cache.read('k', source.load, () => ['u:1', 'o:1']);
  assert.equal(await read(), 1);
  assert.equal(await read(), 1);
  cache.invalidate([{ user: '2' }]);
  assert.equal(await read(), 1, 'another user: still served');
  cache.invalidate([{ organization: '1' }]);
  assert.equal(await read(), 2);
  cache.invalidate(['all']);
  assert.equal(await read(), 3);
});

test('a load that raced with an invalidation is not served afterwards', async () => {
  const cache = new AccessCache({ ttlMs: 60_000, maxEntries: 100 });
  let loads = 0;
  const racing = cache.read('k', async () => {
    loads += 1;
    // The change commits (and invalidates) while this read of the old state is in flight.
    cache.invalidate([{ session: 's' }]);
    return 'old';
  }, () => ['s:s']);
  assert.equal(await racing, 'old');
  assert.equal(await cache.read('k', async () => { loads += 1; return 'new'; }, () => ['s:s']), 'new');
  assert.equal(loads, 2);
});

test('the expiry bounds an entry whatever was heard', async () => {
  const cache = new AccessCache({ ttlMs: 30, maxEntries: 100 });
  const source = counter();
  assert.equal(await cache.read('k', source.load, () => []), 1);
  assert.equal(await cache.read('k', source.load, () => []), 1);
  await new Promise((resolve) => setTimeout(resolve, 40));
  assert.equal(await cache.read('k', source.load, () => []), 2);
});

test('nothing is served while the carrier is deaf; what it publishes is every invalidation', async () => {
  const published: unknown[] = [];
  const carrier: InvalidationCarrier & { listening: boolean } = { listening: false, publish: (scopes) => void published.push(scopes), close: async () => {} };
  const cache = new AccessCache({ ttlMs: 60_000, maxEntries: 100 });
  cache.attachCarrier(carrier);
  const source = counter();
  await cache.read('k', source.load, () => []);
  await cache.read('k', source.load, () => []);
  assert.equal(source.loads, 2, 'deaf: every read loads');
  carrier.listening = true;
  await cache.read('k', source.load, () => []);
  await cache.read('k', source.load, () => []);
  assert.equal(source.loads, 3);
  cache.invalidate([{ user: 'u' }]);
  assert.deepEqual(published, [[{ user: 'u' }]]);
  // What the carrier hears is applied here and not published again.
  cache.apply([{ user: 'v' }]);
  assert.equal(published.length, 1);
});

test('peers in one process hear each other at once; a miss with no scopes is not kept', async () => {
  const peers = new Set<AccessCache>();
  const first = new AccessCache();
  const second = new AccessCache();
  first.joinPeers(peers);
  second.joinPeers(peers);
  const source = counter();
  await second.read('k', source.load, () => ['u:1']);
  first.invalidate([{ user: '1' }]);
  await second.read('k', source.load, () => ['u:1']);
  assert.equal(source.loads, 2);
  const misses = counter();
  await first.read('gone', misses.load, () => undefined);
  await first.read('gone', misses.load, () => undefined);
  assert.equal(misses.loads, 2);
});

test('events name what they end; routine events end nothing', () => {
  const base = { id: 'e', occurred_at: '', actor_id: null, ip: null };
  assert.deepEqual(scopesOfEvent({ ...base, type: 'auth.token_refreshed', user_id: 'u', organization_id: null, data: { session_id: 's' } }), []);
  assert.deepEqual(scopesOfEvent({ ...base, type: 'member.removed', user_id: 'u', organization_id: 'o', data: {} }), [{ user: 'u' }, { organization: 'o' }]);
  assert.deepEqual(scopesOfEvent({ ...base, type: 'mfa.step_up_completed', user_id: 'u', organization_id: null, data: { session_id: 's' } }), [{ user: 'u' }, { session: 's' }]);
  assert.deepEqual(scopesOfEvent({ ...base, type: 'org.updated', user_id: null, organization_id: 'o', data: {} }), ['all']);
});

test('a page of rows counts one per row against the bound; the oldest entries make room', async () => {
  const cache = new AccessCache({ ttlMs: 60_000, maxEntries: 10 });
  const rows = (count: number) => async () => Array.from({ length: count }, (_, index) => index);
  for (const key of ['a', 'b', 'c']) await cache.read(key, async () => key, () => ['u:1']);
  await cache.read('page', rows(8), () => ['o:1'], (value) => value.length);
  assert.equal(cache.sizes().weight, 10, 'the oldest single entry went to make room for the eight rows');
  assert.equal(cache.sizes().entries, 3);
  const source = counter();
  assert.equal(await cache.read('a', source.load, () => ['u:1']), 1, 'the oldest was evicted and loads again');
  // A page larger than the whole bound is never kept.
  const big = counter();
  const loadBig = async () => {
    await big.load();
    return [...Array(11).keys()];
  };
  const readBig = () => cache.read('big', loadBig, () => ['o:1'], (value) => value.length);
  await readBig();
  await readBig();
  assert.equal(big.loads, 2);
  assert.ok(cache.sizes().weight <= 10);
  cache.invalidate(['all']);
  assert.deepEqual([cache.sizes().entries, cache.sizes().weight], [0, 0]);
});
