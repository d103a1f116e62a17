import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { after, before, test } from 'node:test';
import { createIdentityRouter } from '../../src/index.js';
import { PasswordHasher } from '../../src/crypto/password-hasher.js';
import { Harness, STRONG_PASSWORD, uniqueEmail } from '../helpers/harness.js';

// Issue 11: the hashing pool uses the machine; argon2id is an option; hashes of either kind
// verify and are re-made in the configured algorithm and cost at the next successful login.

const FAST_ARGON2 = { memoryCost: 1024, timeCost: 1, parallelism: 1 };

let h: Harness;
before(async () => {
  h = await Harness.start();
});
after(async () => {
  await h.close();
});

async function storedHash(harness: Harness, userId: string): Promise<string> {
  const row = await harness.knex(`${harness.tablePrefix}users`).where({ id: userId }).first('password_hash');
  return String(row.password_hash);
}

/** Another instance on the same database with other password settings. */
async function withInstance<T>(password: Record<string, unknown>, work: (instance: Harness) => Promise<T>): Promise<T> {
  const instance = await Harness.start({ shareDatabaseWith: h, config: { password } });
  try {
    return await work(instance);
  } finally {
    await instance.close();
  }
}

test('the pool defaults to one thread per core; password.workers sets it', async () => {
  const pepper = Buffer.alloc(32, 1);
  const byDefault = new PasswordHasher({ cost: 4, pepper });
  const three = new PasswordHasher({ cost: 4, pepper, threads: 3 });
  try {
    assert.equal(byDefault.poolSize, availableParallelism());
    assert.equal(three.poolSize, 3);
    // Three hashes at once all run: the pool grows to its size, not beyond.
    const hashes = await Promise.all([1, 2, 3, 4].map((n) => three.hash(`password ${n}`)));
    assert.equal(new Set(hashes).size, 4);
  } finally {
    await Promise.all([byDefault.close(), three.close()]);
  }
  const base = { database: { client: 'better-sqlite3', connection: { filename: ':memory:' } }, secret: 'x'.repeat(32), issuer: 'https://id.example.test' } as const;
  assert.throws(() => createIdentityRouter({ ...base, password: { workers: 0 } } as never), /password\.workers/);
  assert.throws(() => createIdentityRouter({ ...base, password: { algorithm: 'md5' } } as never), /password\.algorithm/);
});

test('argon2id: new hashes are argon2id, and they verify', async () => {
  await withInstance({ algorithm: 'argon2id', argon2: FAST_ARGON2 }, async (argon) => {
    const user = await argon.signUp(uniqueEmail('argon'));
    assert.match(await storedHash(argon, user.userId), /^\$argon2id\$v=19\$m=1024,t=1,p=1\$/);
    assert.equal((await argon.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
    assert.equal((await argon.post('/auth/login', { email: user.email, password: `${STRONG_PASSWORD}!` })).status, 401);
  });
});

test('a bcrypt hash verifies under argon2id and is re-made as argon2id at the next successful login', async () => {
  const user = await h.signUp(uniqueEmail('migrating'));
  const bcryptHash = await storedHash(h, user.userId);
  assert.match(bcryptHash, /^\$2[aby]\$04\$/);
  await withInstance({ algorithm: 'argon2id', argon2: FAST_ARGON2 }, async (argon) => {
    // A wrong password never rewrites the hash.
    assert.equal((await argon.post('/auth/login', { email: user.email, password: 'not the password at all' })).status, 401);
    assert.equal(await storedHash(argon, user.userId), bcryptHash);
    assert.equal((await argon.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
    assert.match(await storedHash(argon, user.userId), /^\$argon2id\$v=19\$m=1024,t=1,p=1\$/);
  });
  // Back on bcrypt (cost 4, this harness): the argon2id hash verifies and becomes bcrypt again.
  assert.equal((await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
  assert.match(await storedHash(h, user.userId), /^\$2[aby]\$04\$/);
});

test('a raised bcrypt cost or changed argon2 parameters re-make the hash; unchanged settings leave it alone', async () => {
  const user = await h.signUp(uniqueEmail('cost'));
  const before = await storedHash(h, user.userId);
  assert.equal((await h.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
  assert.equal(await storedHash(h, user.userId), before, 'same algorithm and cost: no rehash');
  await withInstance({ bcryptCost: 5 }, async (stronger) => {
    assert.equal((await stronger.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
    assert.match(await storedHash(stronger, user.userId), /^\$2[aby]\$05\$/);
  });
  await withInstance({ algorithm: 'argon2id', argon2: FAST_ARGON2 }, async (argon) => {
    assert.equal((await argon.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
  });
  await withInstance({ algorithm: 'argon2id', argon2: { ...FAST_ARGON2, timeCost: 2 } }, async (argon) => {
    assert.equal((await argon.post('/auth/login', { email: user.email, password: STRONG_PASSWORD })).status, 200);
    assert.match(await storedHash(argon, user.userId), /^\$argon2id\$v=19\$m=1024,t=2,p=1\$/);
  });
});
